"""The documentation site: it builds with warnings as errors, and every Python code
block of the user guide (docs/index.md, docs/guide/*.md) runs and its asserts hold."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GUIDE = [DOCS / "index.md", *sorted((DOCS / "guide").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# A page whose blocks import one of these runs only where it is installed.
OPTIONAL = ("torch", "jax", "dask")


def python_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def test_every_guide_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in GUIDE:
        assert str(page.relative_to(DOCS)) in nav, page


def test_the_guide_has_code_to_run():
    blocks = {page.name: python_blocks(page) for page in GUIDE}
    assert sum(len(b) for b in blocks.values()) >= 20, blocks.keys()
    # Every page but a few prose ones shows code.
    assert all(blocks[name] for name in ("index.md", "activities.md", "numba.md", "dask.md"))


def test_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(site)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    api = (site / "api" / "index.html").read_text()
    for anchor in (
        "enzyme_py._api.autodiff",
        "enzyme_py.rules.register_gradient",
        "enzyme_py._hessians.hessian",
        "enzyme_py.jax.primitive",
        "enzyme_py.offload._kernel.kernel",
    ):
        assert f'id="{anchor}"' in api, anchor
    for page in ("guide/activities", "guide/dask", "limitations", "benchmarks/suite", "wheels"):
        assert (site / page / "index.html").is_file(), page


@pytest.mark.needs_enzyme
@pytest.mark.parametrize("page", GUIDE, ids=lambda p: str(p.relative_to(DOCS)))
def test_guide_code_blocks_run(page, tmp_path):
    blocks = python_blocks(page)
    if not blocks:
        pytest.skip(f"{page.name} has no Python code blocks")
    source = "\n\n".join(blocks)
    for module in OPTIONAL:
        if re.search(rf"^\s*(import|from) {module}\b", source, re.MULTILINE) and (
            importlib.util.find_spec(module) is None
        ):
            pytest.skip(f"{page.name} needs {module}")
    script = tmp_path / f"{page.stem}_blocks.py"
    script.write_text(source)
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{page.name}:\n{proc.stdout}\n{proc.stderr}"


def test_readme_links_are_absolute():
    """The README is the PyPI page: a relative link or image would break there."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert targets
    relative = [t for t in targets if not t.startswith(("https://", "http://", "#"))]
    assert not relative, relative
    # One project URL throughout: pyproject's [project.urls], mkdocs.yml and the README.
    pyproject = (ROOT / "pyproject.toml").read_text()
    home = re.search(r'^Homepage = "([^"]+)"', pyproject, re.MULTILINE)
    docs = re.search(r'^Documentation = "([^"]+)"', pyproject, re.MULTILINE)
    assert home and docs
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert f"repo_url: {home[1]}" in mkdocs and f"site_url: {docs[1]}" in mkdocs
    for target in targets:
        if "github.com" in target and "/blob/" in target:
            assert target.startswith(home[1] + "/blob/main/"), target
            path = target.removeprefix(home[1] + "/blob/main/").split("#")[0]
            assert (ROOT / path).exists(), target
