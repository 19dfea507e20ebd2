"""The documentation site's sources are whole: every public name documented, every page reachable.

Fast checks that need no mkdocs. The strict build itself (``mkdocs build --strict``: rendering
every docstring, every link and anchor) runs in ``make docs``, which ``make test`` runs first.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml

import calwatch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
#: Folders of docs/ that hold build helpers (griffe extensions, theme overrides), not pages.
NOT_PAGES = ("hooks", "overrides")
#: ``::: dotted.path`` at the start of a line: one mkdocstrings entry.
ENTRY = re.compile(r"^:::[ \t]+([\w.]+)[ \t]*$", re.MULTILINE)
#: Markdown links and images: ``[text](target)``, ``![alt](target "title")``.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


# --- helpers -------------------------------------------------------------------------------------


def reference_entries(folder: Path = REFERENCE) -> dict[str, Path]:
    """Every ``::: path`` entry of the reference pages, and the page it is on."""
    entries: dict[str, Path] = {}
    for page in sorted(folder.rglob("*.md")):
        for path in ENTRY.findall(without_code(page.read_text(encoding="utf-8"))):
            entries.setdefault(path, page)
    return entries


def missing_public_names(public: Iterable[str], entries: Iterable[str]) -> list[str]:
    """The names of ``calwatch.__all__`` with no ``::: calwatch.<name>`` entry (their public path)."""
    documented = set(entries)
    return sorted(name for name in public if f"calwatch.{name}" not in documented)


def without_code(text: str) -> str:
    """Markdown text with fenced blocks and code spans blanked (their links and headings are not ones)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub("", text)


def nav_paths(nav: object) -> Iterator[str]:
    """Every file the ``nav`` of mkdocs.yml names (titles dropped, sections walked)."""
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_paths(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_paths(value)


def mkdocs_config() -> dict[str, object]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def pages() -> list[Path]:
    """The Markdown pages of the site (docs/, less the build helpers)."""
    return sorted(
        p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).parts[0] not in NOT_PAGES and p.is_file()
    )


def slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` gives a heading (its default ``slugify``)."""
    text = re.sub(r"<[^>]+>", "", heading).replace("`", "")
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    text = FENCE.sub("", text)
    return {slug(h) for h in HEADING.findall(text)}


def relative_links(page: Path) -> Iterator[str]:
    """The page's link targets that point inside the repository (no scheme, no bare ``#anchor``)."""
    for target in LINK.findall(without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")):
            continue
        yield target


def broken_links(page: Path) -> list[str]:
    """Relative links of ``page`` whose file does not exist, or whose ``#anchor`` is no heading there."""
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target} (no heading #{fragment} in {resolved.name})")
    return broken


def is_module(path: str) -> bool:
    """Whether ``path`` names a module (found without importing it; its parent package is imported)."""
    try:
        return importlib.util.find_spec(path) is not None
    except ModuleNotFoundError:  # the parent is a module, not a package: the path names an attribute
        return False


# --- the API reference ---------------------------------------------------------------------------


def test_every_public_name_has_a_reference_entry_under_its_public_path() -> None:
    entries = reference_entries()
    assert entries, f"no ::: entries under {REFERENCE}"
    missing = missing_public_names(calwatch.__all__, entries)
    assert not missing, (
        f"calwatch.__all__ names without a '::: calwatch.<name>' entry in docs/reference: {missing}"
    )


def test_the_coverage_check_notices_a_name_left_out() -> None:
    entries = set(reference_entries())
    for name in ("Monitor", "VennAdmit", "__version__"):
        assert missing_public_names(calwatch.__all__, entries - {f"calwatch.{name}"}) == [name]
    assert missing_public_names([*calwatch.__all__, "NotYetDocumented"], entries) == ["NotYetDocumented"]


def test_the_cluster_adapters_are_in_the_reference() -> None:
    entries = reference_entries()
    for module in ("calwatch.scale.spark", "calwatch.scale.dask"):
        assert module in entries, f"no '::: {module}' entry in docs/reference"
        text = entries[module].read_text(encoding="utf-8")
        block = text.split(f"::: {module}", 1)[1].split(":::", 1)[0]
        for function in ("observe", "label"):
            assert re.search(rf"\b{function}\b", block), f"'::: {module}' does not list {function}"


def test_every_reference_entry_names_something_that_exists() -> None:
    for path, page in reference_entries().items():
        head, _, tail = path.rpartition(".")
        assert path.startswith("calwatch"), f"{page.name}: ::: {path} is not calwatch's"
        if is_module(path):  # calwatch.scale.spark, calwatch.monitor.compare (found, not imported)
            continue
        if head == "calwatch":  # a top-level name: public, or it is no reference of the API
            assert tail in calwatch.__all__, f"{page.name}: ::: {path} is not in calwatch.__all__"
            continue
        module = importlib.import_module(head)
        assert hasattr(module, tail), f"{page.name}: ::: {path}: {head} has no {tail!r}"


# --- pages, nav and links ------------------------------------------------------------------------


def test_every_nav_entry_exists_and_every_page_is_in_the_nav() -> None:
    config = mkdocs_config()
    assert config.get("docs_dir", "docs") == "docs"
    listed = list(nav_paths(config["nav"]))
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"
    missing = [p for p in listed if not (DOCS / p).is_file()]
    assert not missing, f"nav entries with no file under docs/: {missing}"
    unlisted = [
        p.relative_to(DOCS).as_posix() for p in pages() if p.relative_to(DOCS).as_posix() not in listed
    ]
    assert not unlisted, f"pages under docs/ missing from the nav: {unlisted}"


def test_every_notebook_is_a_page() -> None:
    listed = set(nav_paths(mkdocs_config()["nav"]))
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    assert not [n for n in notebooks if f"notebooks/{n}" not in listed], "notebooks missing from the nav"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    assert not broken_links(page)


def test_the_readme_links_and_names_existing_docs() -> None:
    readme = ROOT / "README.md"
    assert not broken_links(readme)
    named = set(re.findall(r"`(docs/[\w./-]+)`", readme.read_text(encoding="utf-8")))
    assert not [n for n in sorted(named) if not (ROOT / n).exists()], (
        "README names docs/ paths that do not exist"
    )


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A page\n\n## Its section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#its-section) [web](https://example.org) `[code](nowhere.md)`\n"
        "[gone](nowhere.md) [bad anchor](there.md#no-such-section)\n\n```\n[in a fence](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "nowhere.md (no such file)",
        "there.md#no-such-section (no heading #no-such-section in there.md)",
    ]


def test_heading_anchors_follow_markdowns_slugs() -> None:
    assert slug("The history in pageable memory (`paged.py`)") == "the-history-in-pageable-memory-pagedpy"
    assert slug("Shift detectors at the monitor's speed") == "shift-detectors-at-the-monitors-speed"
    assert slug("Correlated rows: `blocks=`") == "correlated-rows-blocks"
