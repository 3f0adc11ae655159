"""Start `draftwise serve ARGS` until /health is ready, print its dflash.config line, stop it."""

import json
import subprocess
import sys
import time
import urllib.request

port = 8123
cmd = [
    sys.executable,
    "-c",
    "import sys; from server.cli import main; sys.exit(main())",
    "serve",
    "--port",
    str(port),
    *sys.argv[1:],
]
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
deadline = time.time() + 300
lines = []
assert proc.stdout is not None  # stdout=PIPE
while time.time() < deadline:
    line = proc.stdout.readline()
    if not line:
        break
    lines.append(line)
    if '"server.ready"' in line or "server.ready" in line or "Uvicorn running" in line:
        break
for _ in range(60):
    try:
        health = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10))
        print("HEALTH", json.dumps(health))
        break
    except Exception as exc:  # noqa: BLE001
        last = exc
        time.sleep(1)
else:
    print("HEALTH unavailable:", last)
proc.terminate()
proc.wait(60)
for line in lines:
    if "dflash" in line or "error" in line.lower():
        print(line.rstrip())
