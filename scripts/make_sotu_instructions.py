#!/usr/bin/env python3
"""Writes the small instruction set `make finetune` trains on, from the State of the Union corpus
in this repository (third_party/data/sotu, CC0): for each address, a chat sample asking who gave
the address of its year, and an alpaca sample asking how it begins. Deterministic; its output is
checked in (third_party/data/sotu_instruct/sotu_qa.jsonl), so this is run only to change it:

  scripts/make_sotu_instructions.py > third_party/data/sotu_instruct/sotu_qa.jsonl
"""
import collections
import json
import os
import sys

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "third_party", "data", "sotu", "data")


def president(stem):
    """'1933_franklin_d_roosevelt_d' -> 'Franklin D. Roosevelt' (the name between year and party)."""
    parts = stem.split("_")[1:-1]
    return " ".join(p.upper() + "." if len(p) == 1 else p.capitalize() for p in parts)


def opening(text, words=24):
    """The address's first words after its salutation ('Fellow-Citizens of ...:')."""
    head = text.strip()
    colon = head.find(":")
    if 0 <= colon < 200:
        head = head[colon + 1:]
    return " ".join(head.split()[:words])


def main():
    addresses = sorted(f for f in os.listdir(CORPUS) if f.endswith(".txt"))
    by_year = collections.defaultdict(list)
    for name in addresses:
        by_year[name.split("_")[0]].append(president(name[:-4]))
    out = sys.stdout
    for name in addresses:
        year, who = name.split("_")[0], president(name[:-4])
        givers = " and ".join(dict.fromkeys(by_year[year]))
        chat = {"messages": [{"role": "user", "content": f"Who gave the State of the Union address of {year}?"},
                             {"role": "assistant", "content": f"{givers}, in {year}."}]}
        with open(os.path.join(CORPUS, name), encoding="utf-8") as f:
            begins = opening(f.read())
        alpaca = {"instruction": f"How does {who}'s State of the Union address of {year} begin?", "input": "",
                  "output": begins + " ..."}
        out.write(json.dumps(chat) + "\n")
        out.write(json.dumps(alpaca) + "\n")


if __name__ == "__main__":
    main()
