"""Chat: messages rendered with the model's own chat template, and the answer read back.

Rendering goes through the tokenizer's `apply_chat_template` (the model's template,
`add_generation_prompt=True`, plus the request's `chat_template_kwargs`), so the prompt
is exactly what the model was trained on. Reading back, Hermes/Qwen tool calls
(`<tool_call>{"name": ..., "arguments": ...}</tool_call>`) are cut out of the text as
it streams; anything that does not parse stays text, so a malformed call is never an
error. Runs on the event loop; no MLX here.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from drafter.grammar import JSON_LAYOUT, lark_grammar
from server.errors import invalid
from server.schemas import ChatCompletionRequest, ChatMessage

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


def message_dict(message: ChatMessage, index: int) -> dict[str, Any]:
    """One message as the chat template reads it (content parts joined as text)."""
    content = message.content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if part.type != "text" or part.text is None:
                raise invalid(
                    f"messages[{index}].content[{j}] has type {part.type!r}; this model "
                    "reads text parts only",
                    "messages",
                    "unsupported_content_type",
                )
            texts.append(part.text)
        content = "".join(texts)
    out: dict[str, Any] = {"role": message.role, "content": content or ""}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": arguments(call.function)},
            }
            for call in message.tool_calls
        ]
    return out


def arguments(function: Any) -> Any:
    """Templates write `arguments | tojson`: hand them a dict when the string is JSON."""
    if isinstance(function.arguments, str):
        try:
            return json.loads(function.arguments)
        except ValueError:
            return function.arguments
    return function.arguments


def template_tools(body: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """The tools the model is shown: none for tool_choice "none", only the named one
    for a named choice."""
    if not body.tools or body.tool_choice == "none":
        return None
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools]
    choice = body.tool_choice
    if choice is not None and not isinstance(choice, str):
        tools = [t for t in tools if t["function"]["name"] == choice.function.name]
        if not tools:
            raise invalid(
                f"tool_choice names {choice.function.name!r}, which is not in tools",
                "tool_choice",
            )
    return tools


@dataclass(frozen=True)
class Rendered:
    prompt: list[int]  # token ids
    parse_tools: bool  # tool calls are cut out of the answer
    grammar: str | None  # a forced tool call's grammar (tool_choice required or named)


def render(body: ChatCompletionRequest, tokenizer: Any) -> Rendered:
    """The prompt, through the model's template. Tools go to the template; a template
    that renders none of them gets them described in a system turn instead (the
    generic format, `generic_tools`). A forced tool call comes with its grammar."""
    if not getattr(tokenizer, "chat_template", None):
        raise invalid(
            "This model has no chat template; use /v1/completions with a prompt",
            "messages",
            "no_chat_template",
        )
    messages = [message_dict(m, i) for i, m in enumerate(body.messages)]
    tools = template_tools(body)
    kwargs = dict(body.chat_template_kwargs or {})
    text = apply_template(tokenizer, messages, None, kwargs)
    if tools is not None:
        with_tools = apply_template(tokenizer, messages, tools, kwargs)
        if with_tools == text:  # the template renders no tools
            with_tools = apply_template(tokenizer, generic_tools(messages, tools), None, kwargs)
        text = with_tools
    forced = bool(tools) and body.tool_choice not in (None, "auto")
    grammar = tool_call_grammar(tools) if forced and tools else None
    prompt = tokenizer.encode(text, add_special_tokens=False)
    return Rendered(prompt, tools is not None, grammar)


GENERIC_TOOLS = (
    "You can call the tools below. To call one, answer with only\n"
    f"{TOOL_OPEN}\n"
    '{{"name": "<the tool\'s name>", "arguments": {{<its arguments as JSON>}}}}\n'
    f"{TOOL_CLOSE}\n"
    "Tools:\n{tools}"
)


def generic_tools(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The messages with the tools described in the system turn (one is added first
    when there is none), for templates that render no tools."""
    specs = "\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools)
    description = GENERIC_TOOLS.format(tools=specs)
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{description}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": description}, *messages]


def tool_call_grammar(tools: list[dict[str, Any]]) -> str:
    """A grammar for exactly one call of one of `tools`, in the Hermes format the
    answer is parsed in: its name and arguments valid against its parameters."""
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                "arguments": tool["function"].get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    schema = {"x-guidance": JSON_LAYOUT, "anyOf": calls}
    open_tag, close_tag = json.dumps(TOOL_OPEN + "\n"), json.dumps("\n" + TOOL_CLOSE)
    return lark_grammar(f"start: {open_tag} call {close_tag}\ncall: %json {json.dumps(schema)}")


def apply_template(
    tokenizer: Any, messages: list[dict[str, Any]], tools: Any, kwargs: dict[str, Any]
) -> str:
    try:
        return tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True, **kwargs
        )
    except Exception as error:  # jinja raises its own errors for what a template refuses
        raise invalid(f"The chat template rejected the messages: {error}", "messages") from None


def parse_call(raw: str) -> dict[str, str] | None:
    """A tool call's {"name", "arguments" (a JSON string)}, or None when it is not one."""
    try:
        call = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    args = call.get("arguments", call.get("parameters", {}))
    return {"name": call["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}


def held_prefix(text: str, tag: str) -> int:
    """Length of the longest tail of text that is a proper prefix of tag."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


@dataclass
class ToolCallParser:
    """Splits streamed text into content and complete tool calls. Text that could still
    open a call is held back; an unclosed or unparsable call is released as text."""

    buffer: str = ""
    inside: bool = False

    def feed(self, text: str) -> tuple[str, list[dict[str, str]]]:
        self.buffer += text
        content = ""
        calls: list[dict[str, str]] = []
        while True:
            if not self.inside:
                start = self.buffer.find(TOOL_OPEN)
                if start < 0:
                    keep = held_prefix(self.buffer, TOOL_OPEN)
                    cut = len(self.buffer) - keep
                    content, self.buffer = content + self.buffer[:cut], self.buffer[cut:]
                    return content, calls
                content += self.buffer[:start]
                self.buffer, self.inside = self.buffer[start + len(TOOL_OPEN) :], True
            else:
                end = self.buffer.find(TOOL_CLOSE)
                if end < 0:
                    return content, calls
                raw = self.buffer[:end]
                self.buffer, self.inside = self.buffer[end + len(TOOL_CLOSE) :], False
                call = parse_call(raw.strip())
                if call is None:
                    content += TOOL_OPEN + raw + TOOL_CLOSE
                else:
                    calls.append(call)

    def finish(self) -> str:
        rest = (TOOL_OPEN if self.inside else "") + self.buffer
        self.buffer, self.inside = "", False
        return rest


def chat_logprobs(legacy: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Legacy completions logprobs as chat `logprobs.content` entries."""

    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    return [
        {
            **entry(token, logprob),
            "top_logprobs": [entry(t, lp) for t, lp in (top or {}).items()],
        }
        for token, logprob, top in zip(
            legacy["tokens"], legacy["token_logprobs"], legacy["top_logprobs"], strict=True
        )
    ]


@dataclass
class ChoiceState:
    """One choice's answer so far, built from the same deltas a stream sends."""

    parser: ToolCallParser | None
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    logprobs: list[dict[str, Any]] | None = None
    started: bool = False

    def deltas(self, text: str, final: bool = False) -> list[dict[str, Any]]:
        """The deltas that text (the end of the answer when final) releases."""
        out: list[dict[str, Any]] = []
        calls: list[dict[str, str]] = []
        if self.parser is None:
            content = text
        else:
            content, calls = self.parser.feed(text)
            if final:
                content += self.parser.finish()
        if content:
            self.content += content
            out.append({"content": content})
        for call in calls:
            tool_call = {
                "index": len(self.tool_calls),
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": call,
            }
            self.tool_calls.append(tool_call)
            out.append({"tool_calls": [tool_call]})
        return out

    def finish_reason(self, reason: str) -> str:
        return "tool_calls" if self.tool_calls and reason == "stop" else reason

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {k: v for k, v in call.items() if k != "index"} for call in self.tool_calls
            ]
        elif message["content"] is None:
            message["content"] = ""
        return message
