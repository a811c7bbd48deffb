"""DeepSpeed's records as bench/deepspeed/harness.py prints them: one `DSREF=<json>` line per arm
(in its log, NAME.txt, and in dsref.jsonl). The table scripts read them here, so a change to
the line's form is made once."""
import json

PREFIX = "DSREF="


def parse(text):
    """Every DSREF record in `text`, in order; a line cut short (a killed run) is left out."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(PREFIX):
            try:
                out.append(json.loads(line[len(PREFIX):]))
            except ValueError:
                pass
    return out


def records(path):
    with open(path) as f:
        return parse(f.read())


def by_arm(path):
    """{arm: its first record} of one file."""
    out = {}
    for d in records(path):
        out.setdefault(d["arm"], d)
    return out
