#!/usr/bin/env python3
"""The layering rules of docs/architecture.md, checked on the code.

Every folder of the library, the CLI and the Python binding states its contract in a README.md
of its own; its line "May include: ..." lists what the folder's files may #include besides
their own folder's headers and the standard and third-party libraries:
  a module or room        common, compress, torch/loop (any header under src/<that>/)
  one header              torch/train/trainer.h (that header only)
  gradsync                the public API (include/gradsync/)
  torch headers           <torch/...>, <ATen/...>, <c10/...> (nowhere else: they cost ~15 s
                          and 1 GB a file, and the core library builds without LibTorch)
A file obeys the README of the nearest folder above it that has one (src/compress/impl/ obeys
src/compress/README.md). A folder of src/, src/torch/, apps/ or python/ without a contract is an
error too, so that a new module states its rules.

  scripts/check_layering.py              check the tree; exit 1 naming every forbidden include
  scripts/check_layering.py --self-test  check that the tree passes and that one planted
                                         forbidden include per rule is caught (ctest runs both)
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The trees whose folders state contracts, and how a folder of each is named in a rule.
CHECKED = ("src", "include/gradsync", "apps/gradsync", "python/csrc")
TORCH_HEADERS = ("torch/", "ATen/", "c10/")
QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ANGLED = re.compile(r"^\s*#\s*include\s+<([^>]+)>")


def module_of(path):
    """The module or room a header path such as "torch/loop/options.h" or "compress/x.h" names
    (its folder under src/), or "gradsync" for the public API."""
    parts = path.split("/")
    if parts[0] == "gradsync":
        return "gradsync"
    if parts[0] == "torch" and len(parts) > 2:
        return "torch/" + parts[1]
    return parts[0]


def folder_name(folder):
    """How a rule names a folder: src/compress -> compress, src/torch/loop -> torch/loop."""
    if folder.startswith("src/"):
        return module_of(folder[len("src/"):] + "/x.h")
    return folder


def read_contracts(root):
    """{folder: (allowed set, torch headers allowed)} for every README with a May include line."""
    contracts = {}
    for top in CHECKED:
        for folder, _, files in os.walk(os.path.join(root, top)):
            if "README.md" not in files:
                continue
            with open(os.path.join(folder, "README.md"), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("May include:"):
                        items = [i.strip(" .`\n") for i in line[len("May include:"):].split(",")]
                        items = {i for i in items if i and i != "nothing else"}
                        torch = "torch headers" in items
                        items.discard("torch headers")
                        contracts[os.path.relpath(folder, root)] = (items, torch)
                        break
    return contracts


def contract_for(path, contracts):
    folder = os.path.dirname(path)
    while folder:
        if folder in contracts:
            return folder
        folder = os.path.dirname(folder)
    return None


def allowed(include, own, rules):
    target = module_of(include)
    return target == own or target in rules or include in rules


def check_file(path, lines, contracts):
    """The forbidden includes of one file, as messages."""
    folder = contract_for(path, contracts)
    if folder is None:
        return [f"{path}: its folder states no contract (a README.md with a 'May include:' line)"]
    rules, torch = contracts[folder]
    own = folder_name(folder)
    errors = []
    for number, line in enumerate(lines, 1):
        quoted = QUOTED.match(line)
        if quoted:
            include = quoted.group(1)
            if "/" not in include or include.startswith("."):
                continue  # the folder's own header, found beside the file
            if not allowed(include, own, rules):
                errors.append(f"{path}:{number}: {own} -> {module_of(include)} "
                              f"(\"{include}\") is not in {folder}/README.md's May include")
        angled = ANGLED.match(line)
        if angled and angled.group(1).startswith(TORCH_HEADERS) and not torch:
            errors.append(f"{path}:{number}: <{angled.group(1)}>: torch headers are not "
                          f"allowed in {folder} (only where a README says 'torch headers')")
    return errors


def source_files(root):
    for top in CHECKED:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith((".h", ".cc", ".hpp", ".cpp")):
                    yield os.path.relpath(os.path.join(folder, name), root)


def check_tree(root, planted=None):
    """Every violation in the tree; `planted` (path, line) adds one line to one file."""
    contracts = read_contracts(root)
    errors = []
    for path in source_files(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            lines = f.read().split("\n")
        if planted and planted[0] == path:
            lines.append(planted[1])
        errors += check_file(path, lines, contracts)
    if planted and not os.path.exists(os.path.join(root, planted[0])):
        errors += check_file(planted[0], [planted[1]], contracts)
    return errors


# One forbidden include per rule the architecture states, planted in a real file of the tree.
PLANTS = [
    ("src/compress/compressor.cc", '#include "data/idx.h"', "compress -> data"),
    ("src/ps/worker_client.cc", '#include "sync/engine.h"', "ps -> sync"),
    ("apps/gradsync/train_recommendation.cc", '#include "ps/embedding_host.h"', "apps/gradsync -> ps"),
    ("src/sim/simulator.cc", "#include <torch/torch.h>", "torch headers"),
    ("src/torch/models/models.cc", '#include "torch/train/trainer.h"', "torch/models -> torch/train"),
    ("src/common/new_module_file.cc", '#include "common/check.h"', "states no contract"),
]


def self_test(root):
    failures = []
    clean = check_tree(root)
    if clean:
        failures.append("the tree itself has violations:\n  " + "\n  ".join(clean))
    for path, line, rule in PLANTS:
        if path.endswith("new_module_file.cc"):
            path = "src/brand_new_module/file.cc"  # a folder without a README
        found = [e for e in check_tree(root, (path, line)) if e not in clean]
        if len(found) != 1 or rule not in found[0]:
            failures.append(f"planted {line} in {path}: expected one violation naming "
                            f"'{rule}', got {found}")
    for failure in failures:
        print("check_layering self-test: FAILED:", failure)
    if not failures:
        print(f"check_layering self-test: the tree passes, and all {len(PLANTS)} planted "
              "forbidden includes were caught")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=ROOT, help="the repository (default: this script's)")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test(args.root)
    errors = check_tree(args.root)
    for error in errors:
        print(error)
    count = sum(1 for _ in source_files(args.root))
    print(f"check_layering: {count} files, {len(errors)} forbidden includes")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
