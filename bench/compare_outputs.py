#!/usr/bin/env python3
"""Runs the same studies with two neuromkl binaries and checks that their outputs are byte-identical,
timings and dates aside. Used to show that a refactoring changed no behaviour.

    python3 bench/compare_outputs.py OLD_BINARY NEW_BINARY [--workdir DIR] [--only CASE,...] [--explain] [--ignore-hash]

Cases (every input is written once, by OLD_BINARY's `simulate`, and read by both binaries):
  wager       the shipped Wager example (regression, permutations, weight maps);
  simulated   a simulated classification cohort (AAL 2 mm grid) with SVM and ENMKL-SVM, permutations;
  batch       a two-study batch over that cohort;
  multimodal  a simulated study of three kernel sources (two image modalities, the second intensity-scaled,
              and a tabular clinical column) with equal source weighting and covariates regressed out inside
              the folds (numeric age, and a categorical sex column the script adds to the table); ENMKL-SVM
              with a grid, SVM, KELM, permutations, weight maps and patterns, the exported model;
  multiclass  a simulated 3-class cohort, twice: shared kernel weights (ENMKL-SVM with a grid, SVM, MK-ELM,
              KELM, permutations) and per-class weights (ENMKL-SVM, SVM);
  mpi_held    `mpirun -np 3 BINARY run` of a study whose subject data and kernels both exceed
              kernels.memory_budget_mb, so that the kernel stage is distributed and kernel k stays on rank
              k mod 3: an image and a connectivity source, an age covariate, unlabelled subjects, ENMKL-SVM,
              SimpleMKL and KELM, permutations, maps, model. The case fails unless each binary's results.json
              records kernels.distributed.kernels_held_by_ranks = true (otherwise it proves nothing about
              held kernels);
  predict     `predict` with OLD_BINARY's exported multimodal model (every learner's final model) on a new
              simulated cohort, with one outer fold's model on the training cohort (in-sample subjects
              marked), and with OLD_BINARY's multiclass model on a new 3-class cohort. Both binaries read the
              same model folders, so this case checks predict alone (the models are compared in their cases).
Small cohorts (the new ones on a 6 mm grid) and few permutations keep it short: all cases take ~35 s of CPU,
45 s of wall time on an otherwise idle 2-core machine.

Both binaries run in the same folders with the same --out paths, one after the other (input_hash, in
results.json, model cards and reports, depends on the study's folder: the same inputs elsewhere differ). The
kernel cache of a case is removed before each run and, after it, moved into the output folder as
kernel_cache/, so the cache entries each binary wrote are compared too. What is normalised, and only that:
JSON keys "date" and "seconds" (the run date and its timings, wherever they are), the "seconds" column of
TSV tables, and in HTML pages the date, the "..., N s" run line and the batch index's seconds column. Two
runs of the same binary differ in nothing else, the MPI case included (checked: OLD = NEW passes every
case, and the raw differences of such a run are those fields only), so no number is normalised.
With --ignore-hash the content hashes (input_hash, cache keys, the XXH3 checksums of arrays, images and model
cards) are normalised too: for changes of the hash function itself. --explain says for each differing file what differs: JSON values by pointer and table
columns with the largest relative change of their numbers, .npy and NIfTI arrays by their largest change
relative to the largest value. Exit 0 when everything is equal, 1 with the differing files listed.
"""
import argparse
import ast
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3"]


def normalise_json(value, ignore_hash):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("seconds", "date") or (ignore_hash and k in ("input_hash", "key", "fingerprint", "xxh3", "card_xxh3", "image_xxh3")):
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
                rel = re.sub(r"(^|/)kernel_cache/[0-9a-f]+/", r"\1kernel_cache/<key>/", rel)
            out[rel] = os.path.join(d, f)
    return out


def compare_trees(a, b, ignore_hash, explain_differences=False):
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
        problems.append(f"differs: {f}" + (f" ({explain(f, paths_a[f], paths_b[f], ignore_hash)})" if explain_differences else ""))
    return problems, len(files_a)


def read_array(path):
    """(shape, values) of a float .npy file or a float NIfTI-1 image (.nii.gz): enough to say how far two differ."""
    data = open(path, "rb").read()
    if path.endswith(".npy"):
        size = int.from_bytes(data[8:10], "little")
        header = ast.literal_eval(data[10:10 + size].decode("latin1"))
        kind, body = header["descr"], data[10 + size:]
        shape = header["shape"]
    else:
        data = gzip.decompress(data)
        shape = struct.unpack("<8h", data[40:56])[1:1 + struct.unpack("<h", data[40:42])[0]]
        kind = {16: "<f4", 64: "<f8"}.get(struct.unpack("<h", data[70:72])[0])
        body = data[int(struct.unpack("<f", data[108:112])[0]):]
    if kind not in ("<f4", "<f8"):
        return shape, None
    width = 4 if kind == "<f4" else 8
    count = len(body) // width
    return shape, struct.unpack(f"<{count}{'f' if width == 4 else 'd'}", body[:count * width])


def relative(x, y):
    return abs(x - y) / max(abs(x), abs(y))


def json_differences(a, b, where, out):
    """JSON pointer (array indices as #) -> largest relative difference of its numbers, or what else changed."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.setdefault(f"{where}/{k}", "only in " + ("new" if k not in a else "old"))
            else:
                json_differences(a[k], b[k], f"{where}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for x, y in zip(a, b):
            json_differences(x, y, f"{where}/#", out)
    elif a != b:
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
        previous = out.get(where)
        out[where] = max(previous if isinstance(previous, float) else 0.0, relative(a, b)) if numbers else "changed"


def explain(name, path_a, path_b, ignore_hash):
    """One line on how two differing files differ: which JSON values or table columns, how far numbers moved."""
    try:
        if name.endswith(".json"):
            out = {}
            json_differences(json.loads(normalise_text(name, open(path_a, "rb").read(), ignore_hash)),
                             json.loads(normalise_text(name, open(path_b, "rb").read(), ignore_hash)), "", out)
        elif name.endswith(".tsv"):
            rows_a, rows_b = ([line.split("\t") for line in open(p).read().splitlines()] for p in (path_a, path_b))
            out = {f"column {c}": "only in " + ("old" if c in rows_a[0] else "new") for c in set(rows_a[0]) ^ set(rows_b[0])}
            if len(rows_a) != len(rows_b):
                out["rows"] = f"{len(rows_a) - 1} vs {len(rows_b) - 1}"
            for c in (c for c in rows_a[0] if c in rows_b[0]):
                i, j = rows_a[0].index(c), rows_b[0].index(c)
                for x, y in zip(rows_a[1:], rows_b[1:]):
                    if x[i] != y[j]:
                        try:
                            out[f"column {c}"] = max(out.get(f"column {c}", 0.0), relative(float(x[i]), float(y[j])))
                        except (ValueError, TypeError):
                            out[f"column {c}"] = "text changed"
        elif name.endswith((".npy", ".nii.gz")):
            (shape_a, a), (shape_b, b) = read_array(path_a), read_array(path_b)
            if shape_a != shape_b or a is None or b is None:
                return f"shape {shape_a} vs {shape_b}" if shape_a != shape_b else "not a float array"
            largest = max(max(abs(v) for v in a), 1e-300)
            return f"max |old - new| = {max(abs(x - y) for x, y in zip(a, b)) / largest:.1e} of the largest |value|"
        else:
            lines_a, lines_b = (normalise_text(name, open(p, "rb").read(), ignore_hash).splitlines() for p in (path_a, path_b))
            changed = sum(x != y for x, y in zip(lines_a, lines_b)) + abs(len(lines_a) - len(lines_b))
            return f"{changed} of {len(lines_a)} lines differ"
    except Exception as error:  # an explanation is a courtesy: never let it hide the verdict
        return f"(not explained: {error})"
    items = [f"{k}: {'rel ' + format(v, '.1e') if isinstance(v, float) else v}" for k, v in out.items()]
    return "; ".join(items[:8]) + (f"; ... {len(items) - 8} more" if len(items) > 8 else "") if items else "bytes differ"


class Case:
    """One named comparison: `commands` (each a (prefix, arguments) pair run as prefix + [binary, "-q"] + arguments)
    write under `out`; `caches` are cleared before and kept after; `check(out)` returns problems of one binary's
    output that a comparison cannot see (e.g. a run that did not take the path the case is about)."""

    def __init__(self, name, out, commands, caches=(), check=None):
        self.name, self.out, self.commands, self.caches, self.check = name, out, commands, list(caches), check


def add_sex_column(table):
    """A categorical covariate for simulated cohorts (which have none): F/M by subject order, unrelated to the target."""
    rows = [line.rstrip("\n").split("\t") for line in open(table)]
    rows[0].append("sex")
    for i, row in enumerate(rows[1:]):
        row.append("M" if i % 3 == 0 else "F")
    open(table, "w").write("".join("\t".join(r) + "\n" for r in rows))


def edit_study(path, **keys):
    study = json.load(open(path))
    study.update(keys)
    json.dump(study, open(path, "w"), indent=2)
    return path


def simulate(old, env, out, *args):
    subprocess.run([old, "-q", "simulate", "--out", out] + [str(a) for a in args], check=True, stdout=subprocess.DEVNULL, env=env)
    return out


def run_case(name, study, caches):
    out = os.path.join(os.path.dirname(study), "results")
    return Case(name, out, [([], ["run", study, "--out", out])], caches)


def classic_cases(work, old, env):
    shutil.copytree(os.path.join(ROOT, "examples", "wager2008_emoreg"), os.path.join(work, "wager"))
    sim = simulate(old, env, os.path.join(work, "sim"), "--subjects", 40, "--seed", 7, "--effect", 0.5, "--signal", "Hippocampus_L,Precuneus_R")
    edit_study(os.path.join(sim, "study.json"), learners=[{"name": "svm"}, {"name": "enmkl_svm", "params": {"mu": 0.5}}],
               cv={"outer": {"scheme": "stratified_kfold", "k": 4}, "inner": {"scheme": "stratified_kfold", "k": 3}}, permutations={"count": 12})
    batch = {"name": "pair", "studies": [{"file": "study.json", "name": "a"},
                                         {"file": "study.json", "name": "b", "overrides": {"learners": [{"name": "kelm"}]}}]}
    json.dump(batch, open(os.path.join(sim, "batch.json"), "w"), indent=2)
    wager_cache, sim_cache = os.path.join(work, "wager", ".neuromkl_cache"), os.path.join(sim, ".neuromkl_cache")
    return [run_case("wager", os.path.join(work, "wager", "study.json"), [wager_cache]),
            run_case("simulated", os.path.join(sim, "study.json"), [sim_cache]),
            Case("batch", os.path.join(sim, "results", "pair"), [([], ["batch", os.path.join(sim, "batch.json")])])]  # its cache is inside it


# The multimodal cohorts: target effect in modality A's Precuneus_R and modality B's Hippocampus_L, age (correlated
# with the target) driving modality A's Frontal_Sup_L, a clinical column; 6 mm grid (downsample 3) to stay fast.
MULTIMODAL = ["--downsample", 3, "--effect", 1, "--signal", "Precuneus_R", "--second-modality", "--signal-b", "Hippocampus_L",
              "--age-regions", "Frontal_Sup_L", "--clinical-effect", 0.5]
THREE_CLASSES = ["--classes", 3, "--downsample", 3, "--effect", 1, "--signal", "Hippocampus_L,Amygdala_L;Precuneus_R;Frontal_Mid_L"]


def multimodal_case(work, old, env):
    cohort = simulate(old, env, os.path.join(work, "multimodal"), "--subjects", 48, "--seed", 7, *MULTIMODAL)
    add_sex_column(os.path.join(cohort, "participants.tsv"))
    study = edit_study(
        os.path.join(cohort, "study.json"),
        kernels={"sources": [{"name": "mri", "kind": "images"},
                             {"name": "pet", "kind": "images", "image_column": "image_b", "intensity": {"scaling": "global_mean"}},
                             {"name": "clin", "kind": "tabular", "tabular": {"table": "participants.tsv", "groups": {"clinical": ["clinical"]}}}],
                 "source_weighting": "equal"},
        covariates={"columns": ["age"], "categorical": ["sex"]},
        learners=[{"name": "enmkl_svm", "params": {"mu": 0.5}, "grid": {"c": [1, 10]}}, {"name": "svm", "params": {"c": 1}}, {"name": "kelm", "params": {"c": 1}}],
        cv={"outer": {"scheme": "stratified_kfold", "k": 4}, "inner": {"scheme": "stratified_kfold", "k": 3}}, permutations={"count": 8})
    return run_case("multimodal", study, [os.path.join(cohort, ".neuromkl_cache")])


def multiclass_case(work, old, env):
    cohort = simulate(old, env, os.path.join(work, "multiclass"), "--subjects", 45, "--seed", 4, *THREE_CLASSES)
    cv = {"outer": {"scheme": "stratified_kfold", "k": 3}, "inner": {"k": 3}}
    shared = edit_study(os.path.join(cohort, "study.json"), target={"column": "group", "task": "multiclass"}, cv=cv, permutations={"count": 6},
                        learners=[{"name": "enmkl_svm", "params": {"mu": 0.5}, "grid": {"c": [1, 10]}}, {"name": "svm", "params": {"c": 1}},
                                  {"name": "mkelm", "params": {"c": 1}}, {"name": "kelm", "params": {"c": 1}}])
    per_class = os.path.join(cohort, "per_class.json")
    shutil.copy(shared, per_class)
    edit_study(per_class, name="three_per_class", target={"column": "group", "task": "multiclass", "multiclass_weights": "per_class"},
               permutations={"count": 0}, learners=[{"name": "enmkl_svm", "params": {"mu": 0.5}}, {"name": "svm", "params": {"c": 1}}])
    out = os.path.join(cohort, "results")
    return Case("multiclass", out, [([], ["run", shared, "--out", os.path.join(out, "shared")]),
                                    ([], ["run", per_class, "--out", os.path.join(out, "per_class")])], [os.path.join(cohort, ".neuromkl_cache")])


def held_by_ranks(out):
    record = json.load(open(os.path.join(out, "results.json")))
    held = record.get("kernels", {}).get("distributed", {}).get("kernels_held_by_ranks")
    return [] if held is True else [f"results.json kernels.distributed.kernels_held_by_ranks is {held!r}, not true: the kernels were not held by the ranks"]


def mpi_held_case(work, old, env):
    # 36 labelled and 4 unlabelled subjects: ~1 MiB of subject data and ~1.5 MiB of kernels, both over 0.2 MiB.
    cohort = simulate(old, env, os.path.join(work, "mpi_held"), "--subjects", 36, "--unlabelled", 4, "--downsample", 3, "--seed", 11,
                      "--age-regions", "Hippocampus_L", "--connectivity", 8, "--connectivity-signal", "node03")
    study = edit_study(
        os.path.join(cohort, "study.json"),
        kernels={"memory_budget_mb": 0.2, "sources": [{"name": "mri", "kind": "images"}, {"name": "fc", "kind": "connectivity",
                                                       "connectivity": {"column": "connectome", "kernels": "network", "nodes": "nodes.tsv"}}]},
        covariates=["age"], cv={"outer": {"k": 4}, "inner": {"k": 3}}, permutations={"count": 6},
        learners=[{"name": "enmkl_svm", "params": {"mu": 0.5}, "grid": {"c": [1, 10]}}, {"name": "simplemkl", "params": {"c": 1, "gap_tolerance": 1e-7}},
                  {"name": "kelm", "params": {"c": 1}}])
    out = os.path.join(cohort, "results")
    # One thread per rank: three ranks already oversubscribe a small machine.
    return Case("mpi_held", out, [(MPIRUN, ["run", study, "--out", out, "--threads", "1"])], [os.path.join(cohort, ".neuromkl_cache")], held_by_ranks)


def predict_case(work, old, env):
    new_subjects = simulate(old, env, os.path.join(work, "new_subjects"), "--subjects", 12, "--seed", 8, *MULTIMODAL)
    add_sex_column(os.path.join(new_subjects, "participants.tsv"))
    new_three = simulate(old, env, os.path.join(work, "new_three_classes"), "--subjects", 15, "--seed", 5, *THREE_CLASSES)
    model = os.path.join(work, "multimodal_old", "model")  # OLD_BINARY's models, kept by the cases before this one
    out = os.path.join(work, "predictions")
    return Case("predict", out, [
        ([], ["predict", model, os.path.join(new_subjects, "participants.tsv"), "--out", os.path.join(out, "multimodal_new_subjects")]),
        ([], ["predict", os.path.join(model, "EnmklSvm", "folds", "2"), os.path.join(work, "multimodal", "participants.tsv"),
              "--out", os.path.join(out, "multimodal_fold2_training_cohort")]),
        ([], ["predict", os.path.join(work, "multiclass_old", "shared", "model"), os.path.join(new_three, "participants.tsv"),
              "--out", os.path.join(out, "multiclass_new_subjects")])])


def run_binary(case, binary, env):
    """Runs the case's commands with `binary`; returns what went wrong (a failed command, a failed check)."""
    for cache in case.caches:
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(case.out, ignore_errors=True)
    os.makedirs(os.path.dirname(case.out), exist_ok=True)
    if all(args[0] == "predict" for _, args in case.commands):
        os.makedirs(case.out)  # predict writes one folder per command inside it
    for prefix, args in case.commands:
        command = prefix + [binary, "-q"] + args
        code = subprocess.run(command, stdout=subprocess.DEVNULL, env=env).returncode
        if code != 0:
            os.makedirs(case.out, exist_ok=True)
            return [f"exit code {code}: {' '.join(command)}"]
    for cache in case.caches:
        if os.path.isdir(cache):
            shutil.move(cache, os.path.join(case.out, "kernel_cache"))
    return case.check(case.out) if case.check else []


# Case names -> the function writing their inputs (with OLD_BINARY) and returning them; predict applies the models of
# the multimodal and multiclass cases, which therefore run before it.
MAKERS = [(("wager", "simulated", "batch"), classic_cases), (("multimodal",), multimodal_case), (("multiclass",), multiclass_case),
          (("mpi_held",), mpi_held_case), (("predict",), predict_case)]


def main():
    started = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--workdir", default="/tmp/neuromkl_compare_outputs")
    ap.add_argument("--only", help="comma-separated case names (predict brings multimodal and multiclass, whose models it applies)")
    ap.add_argument("--ignore-hash", action="store_true")
    ap.add_argument("--explain", action="store_true", help="list every differing file with what differs in it (JSON values, table columns, "
                                                          "largest relative difference of numbers and arrays)")
    args = ap.parse_args()
    names = [n for group, _ in MAKERS for n in group]
    wanted = set(args.only.split(",")) if args.only else set(names)
    if wanted - set(names):
        ap.error(f"unknown case(s) {', '.join(sorted(wanted - set(names)))}; cases: {', '.join(names)}")
    if "predict" in wanted:
        wanted |= {"multimodal", "multiclass"}
    if "mpi_held" in wanted and not shutil.which(MPIRUN[0]):
        ap.error("mpirun not found: the mpi_held case needs it (leave it out with --only)")
    old, new = os.path.abspath(args.old), os.path.abspath(args.new)
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, NEUROMKL_DATA_DIR=ROOT)  # both binaries read the same built-in atlas files

    failures = 0
    for group, make in MAKERS:
        if not wanted & set(group):
            continue
        made = make(work, old, env)
        for case in (made if isinstance(made, list) else [made]):
            if case.name not in wanted:
                continue
            case_started = time.monotonic()
            outputs, failed = [], []
            for tag, binary in (("old", old), ("new", new)):
                failed += [f"{tag}: {p}" for p in run_binary(case, binary, env)]
                kept = os.path.join(work, f"{case.name}_{tag}")
                shutil.move(case.out, kept)
                outputs.append(kept)
            differing, count = compare_trees(outputs[0], outputs[1], args.ignore_hash, args.explain)
            verdict = "identical" if not differing else f"{len(differing)} differ"
            print(f"{case.name}: {count} files, {verdict}{', FAILED' if failed else ''} ({time.monotonic() - case_started:.0f} s)", flush=True)
            shown = len(differing) if args.explain else 20
            for p in failed + differing[:shown]:
                print("   ", p)
            if len(differing) > shown:
                print(f"    ... and {len(differing) - shown} more (--explain lists them all)")
            failures += bool(failed or differing)
    cases = len(wanted)
    print(f"{cases - failures} passed, {failures} failed ({time.monotonic() - started:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
