"""A full disk for tests: a small tmpfs mounted for the test, and a filler file that
takes its last byte. Mounting needs root, as CI and the test machines run: a test that
cannot mount fails, it does not skip."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def mounted_tmpfs(mount: Path, size: str, options: str = "") -> Iterator[Path]:
    """`mount` (made if missing) as a tmpfs of `size`, unmounted after."""
    mount.mkdir(exist_ok=True)
    extra = f",{options}" if options else ""
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}{extra}", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, f"cannot mount a tmpfs (run as root): {result.stderr}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem has no byte left."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return filler
                chunk = chunk[: len(chunk) // 2]
