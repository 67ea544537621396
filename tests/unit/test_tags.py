"""The BIO tag scheme: parsing a tag, ordering a tag set, entity spans by conlleval/seqeval rules."""

import pytest

from domainbert.data.tags import bio_order, get_entities, split_tag


def test_split_tag():
    assert split_tag("O") == ("O", "")
    assert split_tag("B-PER") == ("B", "PER")
    assert split_tag("I_LOC") == ("I", "LOC")
    for bad in ("PER", "B-", "X-PER", ""):
        with pytest.raises(ValueError, match="not in BIO form"):
            split_tag(bad)


def test_bio_order_puts_o_first_and_both_prefixes_per_type():
    assert bio_order({"I-PER", "O", "B-LOC"}) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert bio_order(["O"]) == ["O"]


@pytest.mark.parametrize(
    "tags,entities",
    [
        (["O", "B-PER", "I-PER", "O"], [("PER", 1, 2)]),
        (["I-PER", "I-PER", "O"], [("PER", 0, 1)]),  # conlleval: I- after O opens an entity
        (["B-PER", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 1)]),  # a type change opens a new one
        (["B-PER", "B-PER"], [("PER", 0, 0), ("PER", 1, 1)]),
        (["O", "B-ORG", "I-ORG"], [("ORG", 1, 2)]),  # entity running to the end
        (["O", "O"], []),
    ],
)
def test_entity_spans(tags, entities):
    assert get_entities(tags) == entities
