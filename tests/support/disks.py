"""Real small file systems for disk-fault tests: a tmpfs of a given size (fills up: ENOSPC) and ext4 on a
loop device that a file-system error remounts read-only. ``Disks`` mounts them under a root dir and
unmounts every one at ``cleanup``; a test that cannot mount (not root, no mkfs.ext4, no trigger) is
skipped with the reason.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest


class Disks:
    """Real small file systems mounted under ``root``; every one is unmounted at teardown."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounts: list[Path] = []

    def _mount(self, args: list[str], target: Path) -> Path:
        if os.geteuid() != 0:
            pytest.skip("disk fault tests mount file systems: they need root")
        target.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a test file system here: {done.stderr.strip()}")
        self.mounts.append(target)
        return target

    def tmpfs(self, name: str, size: str = "2m") -> Path:
        return self._mount(["-t", "tmpfs", "-o", f"size={size}", "tmpfs"], self.root / name)

    def ext4(self, name: str, size_mb: int = 16) -> Path:
        """An ext4 image on a loop device; a file-system error remounts it read-only."""
        self.root.mkdir(parents=True, exist_ok=True)
        image = self.root / f"{name}.img"
        if not os.path.exists(image):
            if shutil.which("mkfs.ext4") is None:
                pytest.skip("mkfs.ext4 is not installed")
            with open(image, "wb") as f:
                f.truncate(size_mb << 20)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        return self._mount(["-o", "loop,errors=remount-ro", str(image)], self.root / name)

    @staticmethod
    def fill(mount: Path) -> Path:
        """Write a filler file until the file system is full; remove it to free the space."""
        filler = mount / "filler"
        chunk = bytes(65536)
        # Unbuffered: a buffered file keeps the bytes of a short write at ENOSPC and raises ENOSPC again
        # when it is closed. Whether that happens depends on the free space left by the broker's own
        # appends, so with a buffered file the test failed at random.
        with open(filler, "wb", buffering=0) as f:
            while True:
                try:
                    f.write(chunk)  # a short write fills the last bytes; the next one raises ENOSPC
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        return filler

    @staticmethod
    def make_read_only(mount: Path) -> None:
        """Fail the ext4 file system as a disk error would: it is remounted read-only at once."""
        os.sync()  # what was written so far reached the disk, as acknowledged data usually has
        source = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(mount)], capture_output=True,
                                text=True).stdout.strip()
        trigger = Path("/sys/fs/ext4") / os.path.basename(source) / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip(f"{trigger} is missing: this kernel cannot fail an ext4 file system on demand")
        trigger.write_text("odradek disk fault test\n")

    def unmount(self, mount: Path) -> None:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        self.mounts.remove(mount)

    def cleanup(self) -> None:
        for mount in reversed(list(self.mounts)):
            self.unmount(mount)
