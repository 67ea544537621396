"""Build ``examples/data/python-docs/``: a second bundled domain made from Python docstrings, nothing downloaded.

    python examples/data/make_python_docs.py            # regenerate the files and the manifest
    python examples/data/make_python_docs.py --check    # verify the committed files against MANIFEST.json

The labelled task: docstrings of the standard library, labelled by the top-level package that holds them
(``asyncio``, ``email``, ``tkinter``...). The unlabelled corpus: docstrings of the standard library's other
modules (single-file modules, the packages left out of the task), the paragraphs of the documentation topics
that ``pydoc`` ships (``pydoc_data/topics.py``), and the docstrings of ``pip`` and ``setuptools`` as installed
next to this interpreter. Source files are parsed with :mod:`ast`; nothing is imported, so no module's import
side effects run. Every list is sorted before use and the only randomness is ``random.Random(seed)``, so the same
interpreter and the same pip/setuptools give the same bytes. Docstrings differ across Python versions, so the
generated files are committed and MANIFEST.json records the versions they came from.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import random
import re
import sys
import sysconfig
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parent / "python-docs"
SPLITS = {"train": 0.5, "validation": 0.15, "test": 0.35}
#: a task label needs this many distinct docstrings; smaller packages go to the corpus
MIN_ROWS = 80
#: rows kept per label at most (a seeded sample), so no package dominates
MAX_ROWS = 200
#: stdlib packages never used as labels: generated codec boilerplate, and the test suite
EXCLUDED = ("encodings", "test", "site-packages")
#: installed packages whose docstrings join the corpus
CORPUS_PACKAGES = ("pip", "setuptools")
MIN_CHARS, MIN_WORDS, MAX_CHARS = 40, 6, 2000
TEST_DIRS = {"test", "tests", "idle_test"}


def clean(text: str) -> str | None:
    """One line of text (whitespace collapsed, cut at a word before ``MAX_CHARS``); None when too short."""
    text = " ".join(text.split())
    if len(text) < MIN_CHARS or len(text.split()) < MIN_WORDS:
        return None
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS].rsplit(" ", 1)[0]
    return text


def key(text: str) -> str:
    """The deduplication key: lower case, letters only (so texts differing by a name's digits or punctuation match)."""
    return re.sub(r"[^a-z]+", "", text.lower())


def docstrings(path: Path) -> list[str]:
    """The cleaned module, class and function docstrings of one source file, in source order; [] if unparsable."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return []
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, kinds)), key=lambda n: getattr(n, "lineno", 0))
    return [t for n in nodes if (doc := ast.get_docstring(n, clean=True)) and (t := clean(doc))]


def source_files(root: Path) -> list[Path]:
    """Every ``.py`` file under ``root`` outside test folders, caches and ``site-packages``, sorted."""
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if parts[0] == "site-packages" or TEST_DIRS & set(parts[:-1]) or "__pycache__" in parts:
            continue
        out.append(path)
    return out


def stdlib_docs(stdlib: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Docstrings of each top-level stdlib package (``{package: texts}``) and those of single-file modules."""
    packages: dict[str, list[str]] = {}
    single: list[str] = []
    for path in source_files(stdlib):
        parts = path.relative_to(stdlib).parts
        texts = docstrings(path)
        if len(parts) == 1:
            single += texts
        elif (stdlib / parts[0] / "__init__.py").is_file():
            packages.setdefault(parts[0], []).extend(texts)
        else:  # data folders (config-3.x, __phello__...)
            single += texts
    return packages, single


def unique_by_label(packages: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each package's distinct texts, sorted; a text (by :func:`key`) found in two packages is dropped from both."""
    owners: dict[str, set[str]] = {}
    first: dict[str, str] = {}
    for name in sorted(packages):
        for text in packages[name]:
            owners.setdefault(key(text), set()).add(name)
            first.setdefault(key(text), text)
    out: dict[str, list[str]] = {}
    for k, names in sorted(owners.items()):
        if len(names) == 1:
            out.setdefault(next(iter(names)), []).append(first[k])
    return {name: sorted(texts) for name, texts in sorted(out.items())}


def split_task(by_label: dict[str, list[str]], seed: int) -> tuple[dict[str, list[dict]], list[str], list[str]]:
    """Stratified train/validation/test rows, the labels kept, and the labels left for the corpus.

    A label with fewer than ``MIN_ROWS`` texts is left out; one with more than ``MAX_ROWS`` keeps a seeded sample.
    Each label's texts are shuffled by ``random.Random(f"{seed}:{label}")`` and cut by the ``SPLITS`` fractions.
    """
    rows: dict[str, list[dict]] = {s: [] for s in SPLITS}
    kept, dropped = [], []
    for label, texts in sorted(by_label.items()):
        if label in EXCLUDED or len(texts) < MIN_ROWS:
            dropped.append(label)
            continue
        kept.append(label)
        texts = list(texts)
        random.Random(f"{seed}:{label}").shuffle(texts)
        texts = texts[:MAX_ROWS]
        n_train = round(len(texts) * SPLITS["train"])
        n_val = round(len(texts) * SPLITS["validation"])
        cuts = {"train": texts[:n_train], "validation": texts[n_train : n_train + n_val]}
        cuts["test"] = texts[n_train + n_val :]
        for split, part in cuts.items():
            rows[split] += [{"text": t, "label": label} for t in part]
    for split in rows:  # a seeded order, so labels are interleaved
        rows[split].sort(key=lambda r: r["text"])
        random.Random(f"{seed}:{split}").shuffle(rows[split])
    return rows, kept, dropped


def topic_paragraphs(stdlib: Path) -> list[str]:
    """The paragraphs of ``pydoc_data/topics.py`` (the language reference pages ``help()`` shows), read as a literal."""
    tree = ast.parse((stdlib / "pydoc_data" / "topics.py").read_text(encoding="utf-8"))
    topics = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign))
    out = []
    for name in sorted(topics):
        out += [t for para in re.split(r"\n\s*\n", topics[name]) if (t := clean(para))]
    return out


def installed(name: str) -> tuple[Path, str]:
    """The folder and version of an installed distribution, found next to this interpreter (not imported)."""
    from importlib.metadata import distribution

    dist = distribution(name)
    return Path(dist.locate_file(name)), dist.version


def build_corpus(
    stdlib: Path, leftovers: list[str], task_keys: set[str], seed: int
) -> tuple[list[str], dict[str, str]]:
    """The corpus lines (distinct, none sharing a key with a task text, in a seeded order) and the versions read."""
    texts = list(leftovers) + topic_paragraphs(stdlib)
    versions = {}
    for name in CORPUS_PACKAGES:
        folder, versions[name] = installed(name)
        for path in source_files(folder):
            texts += docstrings(path)
    seen = set(task_keys)
    out = []
    for text in sorted(texts):
        if key(text) not in seen:
            seen.add(key(text))
            out.append(text)
    random.Random(f"{seed}:corpus").shuffle(out)  # sources interleaved, so any held-out slice is a fair sample
    return out, versions


def sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(out: Path, seed: int) -> dict:
    """Generate every file into ``out`` and write ``MANIFEST.json``; return the manifest."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    packages, single = stdlib_docs(stdlib)
    by_label = unique_by_label(packages)
    rows, kept, dropped = split_task(by_label, seed)
    task_keys = {key(t) for texts in by_label.values() for t in texts}  # unsampled rows stay out of the corpus too
    leftovers = single + [t for name in dropped for t in by_label[name]]
    corpus, versions = build_corpus(stdlib, leftovers, task_keys, seed)
    out.mkdir(parents=True, exist_ok=True)
    for split, part in rows.items():
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
        (out / f"{split}.jsonl").write_text(lines, encoding="utf-8")
    with open(out / "corpus.txt.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write("".join(t + "\n" for t in corpus).encode("utf-8"))
    manifest = describe(out, rows, len(corpus))
    manifest["source"] = {
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "packages": versions,
        "seed": seed,
        "labels_dropped": dropped,
        "rule": f"top-level stdlib package with at least {MIN_ROWS} distinct docstrings, at most {MAX_ROWS} kept; "
        f"excluded: {', '.join(EXCLUDED)}",
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def describe(out: Path, rows: dict[str, list[dict]], corpus_lines: int) -> dict:
    """Per-file SHA-256 and row counts, and the class balance of every split."""
    files = {f"{s}.jsonl": {"sha256": sha256(out / f"{s}.jsonl"), "rows": len(r)} for s, r in rows.items()}
    files["corpus.txt.gz"] = {"sha256": sha256(out / "corpus.txt.gz"), "rows": corpus_lines}
    balance = {s: dict(sorted(Counter(r["label"] for r in part).items())) for s, part in rows.items()}
    return {"files": files, "balance": balance}


def read_rows(path: Path) -> list[dict]:
    """The JSON rows of a ``.jsonl`` file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def check(out: Path) -> list[str]:
    """What disagrees between ``out``'s files and its MANIFEST.json (hashes, row counts, balance); [] when none."""
    manifest = json.loads((out / "MANIFEST.json").read_text(encoding="utf-8"))
    problems = []
    for name, want in sorted(manifest["files"].items()):
        path = out / name
        if not path.is_file():
            problems.append(f"{name}: missing")
            continue
        if sha256(path) != want["sha256"]:
            problems.append(f"{name}: sha256 differs from the manifest")
        if name.endswith(".gz"):
            rows = sum(1 for _ in gzip.open(path, "rt", encoding="utf-8"))
        else:
            part = read_rows(path)
            rows = len(part)
            split = name.removesuffix(".jsonl")
            if dict(sorted(Counter(r["label"] for r in part).items())) != manifest["balance"].get(split):
                problems.append(f"{name}: class balance differs from the manifest")
        if rows != want["rows"]:
            problems.append(f"{name}: {rows} rows, manifest says {want['rows']}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Regenerate (default) or ``--check`` the bundled python-docs domain; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default: examples/data/python-docs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling and the splits")
    parser.add_argument("--check", action="store_true", help="verify the files against MANIFEST.json; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.out)
        for line in problems:
            print(f"{args.out}: {line}", file=sys.stderr)
        print("python-docs: " + ("MISMATCH" if problems else "files match MANIFEST.json"))
        return 1 if problems else 0
    manifest = write(args.out, args.seed)
    for name, entry in manifest["files"].items():
        print(f"{name}: {entry['rows']} rows, sha256 {entry['sha256'][:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
