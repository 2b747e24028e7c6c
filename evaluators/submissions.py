"""Taking a submission in: the path must stay inside the agent's workspace, and the grader reads only what it
checked.

The agent keeps writing its workspace while the grader works, so a check of the paths followed by a load of the same
paths can be raced: a file swapped for a link to another cell's weights, or for a FIFO, between the two. The grader
therefore never loads from the workspace. `private_copy` copies the submitted folder into a folder of the grader's
own (the agent cannot see it), reading each file through a descriptor it opened itself: entries are opened with
O_NOFOLLOW relative to their folder's descriptor, a link the agent made is opened by the kernel confined to the
workspace (openat2 RESOLVE_BENEATH: a link that leads out fails, whenever it was swapped in), and what was opened is
checked with fstat (a FIFO opened non-blocking answers at once; it is refused, never read). Everything after (the
size check, the load, the digest, the score cache's key, the kept final candidate) reads the copy.
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from contracts.refusals import Refusal

# openat2(2): resolve a path beneath a directory descriptor, in the kernel (Linux >= 5.6)
SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64
RESOLVE_NO_MAGICLINKS, RESOLVE_BENEATH = 0x02, 0x08
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # non-blocking: opening a FIFO must never wait


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def open_beneath(root_fd: int, rel: str, flags: int = OPEN_FLAGS) -> int:
    """A descriptor for `rel` (links followed) resolved strictly inside the folder `root_fd`; OSError(EXDEV) when the
    path or a link on it leads out. Without openat2 (an old kernel), links are not followed at all (ELOOP)."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(SYS_OPENAT2, root_fd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how))
    if fd >= 0:
        return fd
    err = ctypes.get_errno()
    if err != errno.ENOSYS:
        raise OSError(err, os.strerror(err), rel)
    fd = os.dup(root_fd)  # no openat2: one component at a time, never following a link
    try:
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        for i, part in enumerate(parts):
            if part == "..":
                raise OSError(errno.EXDEV, "'..' in a path", rel)
            last = i == len(parts) - 1
            nxt = os.open(part, (flags if last else OPEN_FLAGS | os.O_DIRECTORY) | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def resolve_model_path(workspace: Path, model_path) -> Path:
    """The submitted directory, resolved; 400 if it is outside the workspace or reaches out through a symlink. (A
    first look, for clear messages; what is read is what `private_copy` opens.)"""
    if not isinstance(model_path, str) or not model_path.strip():
        raise Refusal("bad_request", 'send JSON {"model_path": "output/<dir>"} with a non-empty string')
    workspace = workspace.resolve()
    given = Path(model_path)
    if ".." in given.parts:
        raise Refusal("path_outside_workspace", f"model_path {model_path!r} must not contain '..'")
    candidate = given if given.is_absolute() else workspace / given
    real = candidate.resolve()
    if real != workspace and workspace not in real.parents:
        raise Refusal("path_outside_workspace",
                      f"model_path {model_path!r} resolves to {real}, outside your workspace {workspace} "
                      "(through a symlink?); save the model under output/")
    if not real.is_dir():
        raise Refusal("not_found", f"model_path {model_path!r} is not a directory in your workspace")
    return real


@dataclass(frozen=True)
class CopyLimits:
    max_files: int
    max_bytes: int


def private_copy(workspace: Path, model_dir: Path, dest: Path, limits: CopyLimits) -> Path:
    """Copy the submitted folder `model_dir` (inside `workspace`) to `dest` (a folder of the grader's own), every
    file read through a descriptor confined to the workspace. Refuses (and leaves no `dest`): a link leading out
    (400), anything but folders and regular files (422, naming it), more files or bytes than the limits (422)."""
    workspace = workspace.resolve()
    rel = os.path.relpath(model_dir, workspace)
    ws_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    counted = {"files": 0, "bytes": 0}
    try:
        dest.mkdir(parents=True)
        top = _open(ws_fd, rel, rel, os.O_DIRECTORY)
        try:
            _copy_folder(ws_fd, top, rel, dest, limits, counted)
        finally:
            os.close(top)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    finally:
        os.close(ws_fd)
    return dest


def _open(ws_fd: int, rel: str, shown: str, extra: int = 0) -> int:
    try:
        return open_beneath(ws_fd, rel, OPEN_FLAGS | extra)
    except OSError as e:
        if e.errno in (errno.EXDEV, errno.ELOOP):
            raise Refusal("path_outside_workspace", f"{shown} is a symlink that leads outside your workspace (or "
                                                    "in a loop); submit real files") from None
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise Refusal("not_found", f"{shown} vanished while it was submitted; submit it again once it is "
                                       "written") from None
        if e.errno == errno.ENXIO:  # a socket (opening one for reading fails this way)
            raise Refusal("not_a_model", f"{shown} is a socket: a submission holds only folders and regular "
                                         "files") from None
        raise


def _copy_folder(ws_fd: int, folder_fd: int, rel: str, dest: Path, limits: CopyLimits, counted: dict) -> None:
    for name in sorted(os.listdir(folder_fd)):
        shown = f"{rel}/{name}"
        try:
            mode = os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue  # deleted while we listed: not part of the submission
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise Refusal("not_a_model", f"{shown} is {kind_of(mode)}: a submission holds only folders and "
                                         "regular files")
        if stat.S_ISLNK(mode):  # the kernel follows it, inside the workspace only
            fd = _open(ws_fd, shown, shown)
        else:
            try:
                fd = os.open(name, OPEN_FLAGS | os.O_NOFOLLOW, dir_fd=folder_fd)
            except OSError as e:
                if e.errno == errno.ELOOP:  # swapped for a link since the stat: that link is checked like any
                    fd = _open(ws_fd, shown, shown)
                elif e.errno == errno.ENXIO:
                    raise Refusal("not_a_model", f"{shown} is a socket: a submission holds only folders and "
                                                 "regular files") from None
                elif e.errno == errno.ENOENT:
                    continue  # renamed or deleted since the stat (an agent's temporary file): not submitted
                else:
                    raise
        try:
            st = os.fstat(fd)  # what was opened, whatever the name points at by now
            counted["files"] += 1
            if counted["files"] > limits.max_files:
                raise Refusal("not_a_model", f"the submission holds more than {limits.max_files} files "
                                             "(grader.submission_max_files); submit the model's folder only")
            if stat.S_ISDIR(st.st_mode):
                (dest / name).mkdir()
                _copy_folder(ws_fd, fd, shown, dest / name, limits, counted)
            elif stat.S_ISREG(st.st_mode):
                counted["bytes"] += st.st_size
                if counted["bytes"] > limits.max_bytes:
                    raise Refusal("not_a_model", f"the submission holds more than {limits.max_bytes / 1e9:.3g} GB "
                                                 f"(at {shown}, grader.submission_max_gb); submit the model's "
                                                 "folder only")
                _copy_file(fd, st.st_size, dest / name)
            else:
                raise Refusal("not_a_model", f"{shown} is {kind_of(st.st_mode)}: a submission holds only folders "
                                             "and regular files")
        finally:
            os.close(fd)


def _copy_file(src_fd: int, size: int, dest: Path) -> None:
    """The file's first `size` bytes (what fstat said; a file that grows meanwhile is cut there), its holes kept as
    holes (a sparse file costs no copying), in the kernel."""
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        offset = 0
        while offset < size:
            try:
                start = os.lseek(src_fd, offset, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: only a hole is left
                    raise
                break
            if start >= size:
                break
            end = min(size, os.lseek(src_fd, start, os.SEEK_HOLE))
            os.lseek(out, start, os.SEEK_SET)
            while start < end:
                sent = os.sendfile(out, src_fd, start, end - start)
                if sent == 0:  # truncated meanwhile
                    end = start
                    break
                start += sent
            offset = end if end > offset else size
        os.ftruncate(out, size)
    finally:
        os.close(out)


# The files whose newest mtime the original's cache key takes (RD-Agent autorl_bench core/server.py _make_cache_key)
CACHE_KEY_SUFFIXES = (".safetensors", ".bin", ".json")


def cache_key(workspace: Path, model_dir: Path, max_entries: int) -> str | None:
    """The original benchmark's cache key of a submitted folder `model_dir` (resolved, inside `workspace`): its path
    and the newest mtime among the .safetensors, .bin and .json files under it (a folder overwritten gets a new
    key). Read as private_copy reads: folders opened confined to the workspace, a link followed only inside it (one
    leading out is left out, as the copy refuses it), nothing opened for reading (a FIFO is stat'ed, never waited
    on), links to folders not descended into (as pathlib's rglob). None (no cache) past `max_entries` entries (the
    copy refuses those) or when the folder is gone."""
    workspace = workspace.resolve()
    top = os.path.relpath(model_dir, workspace)
    ws_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    newest, seen, pending = 0.0, 0, [top]
    try:
        while pending:  # a stack of folders, not recursion: the tree's depth is the agent's
            folder = pending.pop()
            try:
                fd = open_beneath(ws_fd, folder, OPEN_FLAGS | os.O_DIRECTORY)
            except OSError:
                if folder == top:
                    return None
                continue  # swapped or removed since it was listed
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > max_entries:
                            return None
                        mtime = _mtime(ws_fd, f"{folder}/{entry.name}", entry, pending)
                        if mtime is not None:
                            newest = max(newest, mtime)
            finally:
                os.close(fd)
    finally:
        os.close(ws_fd)
    return f"{model_dir}@{newest}"


def _mtime(ws_fd: int, rel: str, entry: os.DirEntry, pending: list[str]) -> float | None:
    """The entry's mtime when it is a key file (a link: what it leads to inside the workspace); a folder is put on
    `pending` instead."""
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return None  # deleted while listed
    if stat.S_ISDIR(st.st_mode):
        pending.append(rel)
        return None
    if Path(entry.name).suffix not in CACHE_KEY_SUFFIXES:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            fd = open_beneath(ws_fd, rel, os.O_PATH)  # (O_PATH: nothing is opened for reading)
        except OSError:
            return None  # leads out, dangles, or loops
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
    return st.st_mtime if stat.S_ISREG(st.st_mode) else None
