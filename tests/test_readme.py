"""The README stays a short front page: its commands exist, and every relative link it holds leads to a file (the
docs site's own links are checked by `mkdocs build --strict` in scripts/test; the README is outside that site)."""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_commands_exist_and_ci_runs_the_test_command():
    block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split()[0] for line in block.splitlines() if line.strip()]
    assert commands == ["scripts/demo", "scripts/test"]
    for command in commands:
        assert os.access(ROOT / command, os.X_OK), command
    assert "exec scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_readme_links_lead_to_files_and_anchors():
    links = re.findall(r"\]\(([^)#]+?)(?:#([^)]+))?\)", README)
    assert len(links) >= 10
    for path, anchor in links:
        if "://" in path:
            continue
        target = ROOT / path
        assert target.is_file(), f"README links to {path}, which does not exist"
        if anchor:  # MkDocs' heading ids: lower case, punctuation dropped, spaces as hyphens
            ids = {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h.strip().lower()))
                   for h in re.findall(r"^#+ (.*)$", target.read_text(), re.M)}
            assert anchor in ids, f"README links to {path}#{anchor}; its headings give {sorted(ids)}"


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 100
