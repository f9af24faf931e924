"""The codec is sans-I/O: importing it loads no event loop, no sockets, no router I/O code."""

import json
import subprocess
import sys

FORBIDDEN_ROOTS = {"trio", "trio_websocket", "asyncio", "socket", "ssl", "selectors"}
FORBIDDEN_OURS = ("router.server", "router.client", "store")


def test_importing_the_codec_loads_no_io_modules():
    probe = (
        "import json, sys\n"
        "import router.protocol\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    loaded = set(json.loads(out))
    assert "router.protocol.codec" in loaded
    assert not {m for m in loaded if m.split(".")[0] in FORBIDDEN_ROOTS}
    assert not {m for m in loaded if m.startswith(FORBIDDEN_OURS)}
