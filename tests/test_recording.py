"""Code snapshots: real git, real files."""
import os
import subprocess
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from contracts.code_snapshots import EMPTY_TREE, diff_summary, history, snapshot_code


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout


def tree_listing(repo: Path, sha: str) -> dict[str, str]:
    """path -> mode for every entry of the commit's tree."""
    rows = git(repo, "ls-tree", "-r", sha).splitlines()
    return {row.split("\t", 1)[1]: row.split()[0] for row in rows}


def listing(root: Path) -> list[tuple[str, float]]:
    return sorted((str(p.relative_to(root)), p.lstat().st_mtime) for p in root.rglob("*"))


def test_snapshot_skips_weights_large_files_and_special_files_and_keeps_links(tmp_path):
    code, repo = tmp_path / "ws" / "code", tmp_path / "cell" / "code.git"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print('train')\n")
    (code / "pkg" / "util.py").write_text("X = 1\n")
    for name in ("model.safetensors", "pytorch_model.bin", "ckpt.PT", "emb.npy", "m.gguf"):
        (code / name).write_bytes(b"weights")
    (code / "big.jsonl").write_bytes(b"x" * (2 << 20))
    (code / "small.jsonl").write_bytes(b"x" * 1000)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not record me")
    (code / "link_out").symlink_to(secret)
    (code / "link_dir").symlink_to(tmp_path)
    os.mkfifo(code / "pipe")  # reading it would block forever
    (code / ".git").mkdir()
    (code / ".git" / "config").write_text("[core]\n")
    before = listing(code)

    sha = snapshot_code(code, repo, "submission 1")

    assert sha and len(sha) == 40
    files = tree_listing(repo, sha)
    assert set(files) == {"train.py", "pkg/util.py", "small.jsonl", "link_out", "link_dir"}
    assert files["link_out"] == files["link_dir"] == "120000"  # recorded as links
    assert git(repo, "show", f"{sha}:link_out") == str(secret)  # the link's target, never the file's content
    message = git(repo, "log", "-1", "--format=%B", sha)
    assert "model.safetensors (model weights" in message and "big.jsonl (" in message and "pipe (not a" in message
    assert listing(code) == before  # nothing written inside code/
    assert not (code / "index").exists()


def test_snapshots_keep_history_and_diff_summary(tmp_path):
    code, repo = tmp_path / "code", tmp_path / "code.git"
    code.mkdir()
    (code / "a.py").write_text("a = 1\n")
    (code / "b.py").write_text("b = 1\nb = 2\n")
    first = snapshot_code(code, repo, "submission 1")
    (code / "a.py").write_text("a = 2\nprint(a)\n")
    (code / "b.py").unlink()
    (code / "c.py").write_text("c = 3\n")
    second = snapshot_code(code, repo, "submission 2")
    third = snapshot_code(code, repo, "submission 3")  # unchanged code still commits

    assert [c["sha"] for c in history(repo)] == [first, second, third]
    assert [c["message"] for c in history(repo)] == ["submission 1", "submission 2", "submission 3"]
    assert git(repo, "rev-parse", f"{third}^").strip() == second

    diff = diff_summary(repo, first, second)
    assert diff["files_changed"] == 3
    assert diff["insertions"] == 2 + 1 and diff["deletions"] == 1 + 2
    assert {f["path"] for f in diff["files"]} == {"a.py", "b.py", "c.py"}
    assert "3 files changed" in diff["stat"]
    assert diff_summary(repo, second, third)["files_changed"] == 0
    assert diff_summary(repo, None, first)["insertions"] == 3


def test_empty_or_missing_code_dir_still_commits(tmp_path):
    repo = tmp_path / "code.git"
    sha = snapshot_code(tmp_path / "missing", repo, "submission 1")
    assert sha and git(repo, "rev-parse", f"{sha}^{{tree}}").strip() == EMPTY_TREE
    (tmp_path / "empty").mkdir()
    assert snapshot_code(tmp_path / "empty", repo, "submission 2") != sha
    assert len(history(repo)) == 2


def _snapshot_many(args):
    code, repo, n = args
    return [snapshot_code(Path(code), Path(repo), f"submission {i}") for i in range(n)]


def test_concurrent_snapshots(tmp_path):
    jobs = []
    for cell in ("c1", "c2"):
        code = tmp_path / cell / "code"
        code.mkdir(parents=True)
        (code / "train.py").write_text(f"cell = {cell!r}\n")
        jobs.append((str(code), str(tmp_path / cell / "code.git"), 5))
    shared = (jobs[0][0], str(tmp_path / "shared.git"), 5)  # the same repository from two processes
    with ProcessPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_snapshot_many, jobs + [shared, shared]))
    assert all(sha for shas in results for sha in shas)
    for _, repo, n in jobs:
        assert len(history(Path(repo))) == n
    assert len(history(tmp_path / "shared.git")) == 10  # no commit lost to a race on the branch


def test_git_failure_returns_none(tmp_path):
    not_a_repo = tmp_path / "file"
    not_a_repo.write_text("a file where the repository should be")
    assert snapshot_code(tmp_path, not_a_repo, "submission 1") is None
