#!/usr/bin/env python3
"""Runs the same studies with two neuromkl binaries and checks that their output folders are
byte-identical, timings and dates aside. Used to show that a refactoring changed no behaviour.

    python3 bench/compare_outputs.py OLD_BINARY NEW_BINARY [--workdir DIR] [--ignore-hash]

Studies: the shipped Wager example (regression, permutations, weight maps), a simulated
classification cohort (written once, by OLD_BINARY) with SVM and ENMKL-SVM, and a two-study batch
over it. Both binaries run in the same folders with the same --out paths, one after the other, and
the kernel cache is removed between them, so paths and cache notes are equal. What is normalised:
the run date, every "seconds" value and timing column, and the run line of report.html. With
--ignore-hash the content hashes (input_hash, cache keys) are normalised too: for changes of the
hash function itself. Exit 0 when everything is equal, 1 with the differing files listed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, **kw):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)


def normalise_json(value, ignore_hash):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("seconds", "date") or (ignore_hash and k in ("input_hash", "key", "fingerprint")):
                out[k] = "<normalised>"
            else:
                out[k] = normalise_json(v, ignore_hash)
        return out
    if isinstance(value, list):
        return [normalise_json(v, ignore_hash) for v in value]
    return value


def normalise_text(name, data, ignore_hash):
    text = data.decode("utf-8", errors="replace")
    if name.endswith(".json"):
        try:
            return json.dumps(normalise_json(json.loads(text), ignore_hash), indent=1, sort_keys=True)
        except json.JSONDecodeError:
            return text
    if name.endswith(".html"):
        text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<date>", text)
        text = re.sub(r", [0-9.]+ s</td>", ", <seconds> s</td>", text)
        text = re.sub(r"(converged</td><td>)[0-9.]+(</td>)", r"\1<seconds>\2", text)  # batch index: seconds column
        if ignore_hash:
            text = re.sub(r"input hash <code>[0-9a-f]+</code>", "input hash <code>-</code>", text)
    if name.endswith(".tsv"):
        lines = text.split("\n")
        header = lines[0].split("\t")
        if "seconds" in header:
            c = header.index("seconds")
            lines = [lines[0]] + ["\t".join(f if i != c else "<seconds>" for i, f in enumerate(l.split("\t"))) for l in lines[1:] if l]
        text = "\n".join(lines)
    return text


def list_files(root, ignore_hash):
    """Relative path (cache folders named by their key normalised with --ignore-hash) -> real path."""
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            rel = os.path.relpath(os.path.join(d, f), root)
            if ignore_hash:
                rel = re.sub(r"^kernel_cache/[0-9a-f]+/", "kernel_cache/<key>/", rel)
            out[rel] = os.path.join(d, f)
    return out


def compare_trees(a, b, ignore_hash):
    problems = []
    paths_a, paths_b = list_files(a, ignore_hash), list_files(b, ignore_hash)
    files_a, files_b = set(paths_a), set(paths_b)
    for f in sorted(files_a ^ files_b):
        problems.append(f"only in {'old' if f in files_a else 'new'}: {f}")
    for f in sorted(files_a & files_b):
        da = open(paths_a[f], "rb").read()
        db = open(paths_b[f], "rb").read()
        if da == db:
            continue
        if f.endswith((".json", ".html", ".tsv")) and normalise_text(f, da, ignore_hash) == normalise_text(f, db, ignore_hash):
            continue
        problems.append(f"differs: {f}")
    return problems, len(files_a)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--workdir", default="/tmp/neuromkl_compare_outputs")
    ap.add_argument("--ignore-hash", action="store_true")
    args = ap.parse_args()
    old, new = os.path.abspath(args.old), os.path.abspath(args.new)
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, NEUROMKL_DATA_DIR=ROOT)  # both binaries read the same built-in atlas files

    shutil.copytree(os.path.join(ROOT, "examples", "wager2008_emoreg"), os.path.join(work, "wager"))
    sim = os.path.join(work, "sim")
    run([old, "simulate", "--out", sim, "--subjects", "40", "--seed", "7", "--effect", "0.5", "--signal", "Hippocampus_L,Precuneus_R"], env=env)
    study = json.load(open(os.path.join(sim, "study.json")))
    study["learners"] = [{"name": "svm"}, {"name": "enmkl_svm", "params": {"mu": 0.5}}]
    study["cv"] = {"outer": {"scheme": "stratified_kfold", "k": 4}, "inner": {"scheme": "stratified_kfold", "k": 3}}
    study["permutations"] = {"count": 12}
    json.dump(study, open(os.path.join(sim, "study.json"), "w"), indent=2)
    batch = {"name": "pair", "studies": [{"file": "study.json", "name": "a"},
                                         {"file": "study.json", "name": "b", "overrides": {"learners": [{"name": "kelm"}]}}]}
    json.dump(batch, open(os.path.join(sim, "batch.json"), "w"), indent=2)

    jobs = [("wager", ["run", os.path.join(work, "wager", "study.json")], os.path.join(work, "wager", "results")),
            ("simulated", ["run", os.path.join(sim, "study.json")], os.path.join(sim, "results")),
            ("batch", ["batch", os.path.join(sim, "batch.json")], os.path.join(sim, "results", "pair"))]
    failures = 0
    for name, cmd, out in jobs:
        outputs = []
        for tag, binary in (("old", old), ("new", new)):
            for cache in (os.path.join(work, "wager", ".neuromkl_cache"), os.path.join(sim, ".neuromkl_cache")):
                shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
            extra = ["--out", out] if cmd[0] == "run" else []
            run([binary, "-q"] + cmd + extra, env=env)
            kept = os.path.join(work, f"{name}_{tag}")
            shutil.move(out, kept)
            outputs.append(kept)
        problems, count = compare_trees(outputs[0], outputs[1], args.ignore_hash)
        print(f"{name}: {count} files, {'identical' if not problems else str(len(problems)) + ' differ'}")
        for p in problems[:20]:
            print("   ", p)
        if len(problems) > 20:
            print(f"    ... and {len(problems) - 20} more")
        failures += bool(problems)
    print(f"{3 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
