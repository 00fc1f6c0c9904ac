"""Storage faults for scripts/chaos.py: a full disk under the job's --checkpoint-dir and a corrupt
checkpoint, and what they left behind (docs/cluster.md, "Chaos harness").

The checkpoints live on a tmpfs of its own (mounted here: root only), so that filling it fills
only the job's checkpoint disk. A checkpoint file is verified as the reader in
src/ckpt/checkpoint_file.cc verifies it last: its trailer's magic and the CRC32 of every byte
before the trailer's CRC field (docs/checkpoints.md, "File format"), which catches any one
corrupted byte.
"""
import glob
import os
import re
import shutil
import subprocess
import zlib

MAGIC = b"GSCKPT\0\0"
SKIPPED = "not written, training goes on"


def verify(path):
    """None when the checkpoint file at PATH is intact, else why not."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 28 or data[:8] != MAGIC or data[-8:] != MAGIC:
        return "bad magic or truncated"
    if zlib.crc32(data[:-12]) != int.from_bytes(data[-12:-8], "little"):
        return "file checksum mismatch"
    return None


class CheckpointStorage:
    """The job's checkpoint directory on a tmpfs of SIZE_MB, filled or corrupted on demand."""

    def __init__(self, mount_point, size_mb, mount):
        """MOUNT: on a tmpfs of SIZE_MB at MOUNT_POINT (the disk fault), else a plain folder."""
        self.mount_point = mount_point
        self.mounted = mount
        self.directory = os.path.join(mount_point, "checkpoints")
        self.filler = os.path.join(mount_point, "filler")
        if os.path.ismount(mount_point):  # a run interrupted before it unmounted
            subprocess.run(["umount", mount_point], check=True)
        shutil.rmtree(mount_point, ignore_errors=True)
        os.makedirs(mount_point)
        if mount:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                            mount_point], check=True)
        os.makedirs(self.directory)
        self.corrupted = []  # file names

    def close(self):
        if self.mounted:
            subprocess.run(["umount", self.mount_point], check=False)

    def fill(self):
        """Takes every free byte of the disk; returns how many."""
        stat = os.statvfs(self.mount_point)
        free = stat.f_bavail * stat.f_frsize
        with open(self.filler, "wb") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, free)
            except OSError:  # whatever fitted stays allocated
                pass
        return free

    def release(self):
        if os.path.exists(self.filler):
            os.remove(self.filler)

    def checkpoints(self):
        """(step, path) of every checkpoint in the directory, ascending."""
        found = []
        for path in glob.glob(os.path.join(self.directory, "step-*.gsckpt")):
            match = re.search(r"step-(\d+)\.gsckpt$", path)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def corrupt_newest(self, draws):
        """Flips one byte of the newest checkpoint; (name, offset), or None when there is none."""
        found = self.checkpoints()
        if not found:
            return None
        path = found[-1][1]
        offset = draws.randrange(os.path.getsize(path))
        with open(path, "r+b") as f:
            f.seek(offset)
            byte = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([byte ^ (1 + draws.randrange(255))]))
        self.corrupted.append(os.path.basename(path))
        return os.path.basename(path), offset

    def report(self, job_log):
        """What the faults left: checkpoints skipped while the disk was full (rank 0's log lines),
        every checkpoint left and whether it is intact, and whether the newest is (the one a
        --resume reads)."""
        with open(job_log, errors="replace") as f:
            skipped = sum(SKIPPED in line for line in f)
        left = [{"step": step, "file": os.path.basename(path), "problem": verify(path)}
                for step, path in self.checkpoints()]
        return {"skipped_while_full": skipped, "corrupted": self.corrupted, "left": left,
                "newest_intact": bool(left) and left[-1]["problem"] is None}
