#!/usr/bin/env python3
"""Names with internal linkage that two sources of one target share: a unity build (CMake's
UNITY_BUILD, on by default: docs/testing.md) compiles a target's sources several to a
translation unit, so two files that each define `kFormat` or `struct Row` in an anonymous
namespace (or a `static` function of one signature) compile alone and fail together with
"redefinition", as soon as an added file moves them into one batch.

    scripts/check_unity_names.py BUILD_DIR      (ctest: unity_names_test)
    scripts/check_unity_names.py --self-test [BUILD_DIR]  (planted names: found, and legal ones
                                                           not; then BUILD_DIR if given)

Reads which sources make up each target from the build's Unity/unity_*.cxx files, then each
source's names at the scope of an anonymous namespace (variables, types, aliases, functions with
their parameter lists) and its namespace-scope `static` functions and variables. Exit status 1
with one line per shared name; 0 when there is none, or when the build is not a unity build.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

INCLUDE = re.compile(r'#include\s+"([^"]+)"')
COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRINGS = re.compile(r'R"(\w*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
TYPE = re.compile(r"^(?:template\s*<.*>\s*)?(?:struct|class|union|enum(?:\s+class)?)\s+(\w+)")
ALIAS = re.compile(r"^(?:using|namespace)\s+(\w+)\s*=\s*(.*)$")
FUNCTION = re.compile(r"(?:^|[\s*&>])(\w+)\s*\((.*)\)\s*(?:const\s*)?(?:noexcept\s*)?"
                      r"(?:->\s*[\w:<>,\s*&]+)?$", re.S)
DIGIT_SEPARATOR = re.compile(r"(?<=[0-9a-fA-F])'(?=[0-9a-fA-F])")
VARIABLE = re.compile(r"(\w+)\s*(?:\[[^\]]*\])?\s*(?:=.*|\{.*\}?)?$", re.S)


def targets(build: Path) -> dict[str, list[Path]]:
    """Each unity-built target's sources (by its Unity folder)."""
    found = defaultdict(list)
    for unity in build.rglob("Unity/unity_*.cxx"):
        for line in unity.read_text(errors="replace").splitlines():
            match = INCLUDE.search(line)
            if match:
                found[str(unity.parent.parent)].append(Path(match.group(1)))
    return found


def statements(text: str):
    """((scope, namespace), statement) for each declaration-like statement at namespace scope,
    where scope is "anonymous" (inside `namespace {`) or "named" and namespace the enclosing
    named ones ("gradsync::ps"); function and class bodies are skipped, a definition's
    statement ending at its opening brace."""
    text = STRINGS.sub('""', COMMENTS.sub(" ", DIGIT_SEPARATOR.sub("", text)))
    text = re.sub(r"^\s*#.*$", "", text, flags=re.M)
    stack, names, start = [], [], 0

    def where():  # ("anonymous" or "named", the enclosing named namespaces)
        return (stack[-1] if stack else "named"), "::".join(n for n in names if n)

    for i, c in enumerate(text):
        if c not in "{;}":
            continue
        head = " ".join(text[start:i].split())
        at_namespace_scope = all(kind in ("named", "anonymous") for kind in stack)
        if "init" in stack:  # inside a braced initializer (or a lambda in one)
            if c == "{":
                stack.append("init")
            elif c == "}":
                stack.pop()
            continue
        if c == "{":
            named = re.match(r"^(?:inline\s+)?namespace(?:\s+([\w:]+))?$", head)
            if named:
                stack.append("named" if named.group(1) else "anonymous")
                names.append(named.group(1) or "")
            elif at_namespace_scope and "=" in head.split("(", 1)[0]:
                stack.append("init")  # `x = T{...}`: the statement goes on to its `;`
                continue
            else:
                if at_namespace_scope and head:
                    yield where(), head
                stack.append("block")
        elif c == "}":
            if stack and stack.pop() in ("named", "anonymous"):
                names.pop()
        elif at_namespace_scope and head:
            yield where(), head
        start = i + 1


def internal_names(source: Path) -> set[tuple[str, str]]:
    """(name, what it is) of each: an alias's target, since an alias may be declared again
    as the same type (legal) but not as another."""
    names = set()
    for (scope, namespace), statement in statements(source.read_text(errors="replace")):
        qualify = f"{namespace}::" if namespace else ""
        is_static = statement.startswith("static ")
        if scope != "anonymous" and not is_static:
            continue
        if statement.startswith(("using namespace", "friend", "return", "extern ")):
            continue
        if statement.startswith(("template", "struct", "class", "union", "enum")):
            match = TYPE.match(statement)
            if match:
                names.add((f"type {qualify}{match.group(1)}", ""))
            continue
        if statement.startswith(("using ", "namespace ")):
            match = ALIAS.match(statement)  # a using-declaration may be repeated: not a name
            if match:
                names.add((f"alias {qualify}{match.group(1)}", " ".join(match.group(2).split())))
            continue
        match = FUNCTION.search(statement)
        if match and "=" not in statement.split("(", 1)[0]:
            parameters = " ".join(match.group(2).split())
            names.add((f"function {qualify}{match.group(1)}({parameters})", ""))
            continue
        head = statement.split("=", 1)[0]
        if "::" in head.split("(", 1)[0].split()[-1] if head.split() else False:
            continue  # a member defined out of its class
        match = VARIABLE.search(head.strip())
        if match and " " in head.strip():
            names.add((f"variable {qualify}{match.group(1)}", ""))
    return names


PLANTED = {
    "a.cc": """namespace gradsync {
namespace {
constexpr int kFormat = 1;            // shared: caught
using Clock = std::chrono::steady_clock;  // the same alias twice: legal
struct Row { int x; };               // shared: caught
int helper(int a, int b = 2) { return a + b; }  // shared signature: caught
double helper(double a) { return a; }  // an overload: legal
constexpr size_t kBig = size_t{1} << 20;  // a braced initializer: one statement
class Impl { void run(); };
void Impl::run() {}                  // a member: not a name of its own
}  // namespace
}  // namespace gradsync
""",
    "b.cc": """namespace gradsync {
namespace {
constexpr int kFormat = 2;
using Clock = std::chrono::steady_clock;
using other::Row;                    // a using-declaration: not a definition
struct Row { double y; };
int helper(int a, int b = 2) { return a * b; }
class Impl { void run(); };
void Impl::run() {}
}  // namespace
namespace ps {
namespace {
constexpr size_t kBig = 3;           // another namespace: legal
}  // namespace
}  // namespace ps
}  // namespace gradsync
""",
}
PLANTED_FOUND = {"variable gradsync::kFormat", "type gradsync::Row",
                 "function gradsync::helper(int a, int b = 2)", "type gradsync::Impl"}


def self_test() -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        unity = root / "target.dir" / "Unity"
        unity.mkdir(parents=True)
        for name, text in PLANTED.items():
            (root / name).write_text(text)
        (unity / "unity_0_cxx.cxx").write_text(
            "".join(f'#include "{root / name}"\n' for name in PLANTED))
        found = {line.split(": ", 1)[1].split(" in ")[0] for line in shared_names(root)}
    if found != PLANTED_FOUND:
        print(f"self-test: found {sorted(found)}, expected {sorted(PLANTED_FOUND)}")
        return 1
    print(f"self-test: the {len(PLANTED_FOUND)} planted shared names found, the legal ones not")
    return 0


def shared_names(build: Path) -> list[str]:
    shared = []
    for target, sources in sorted(targets(build).items()):
        owners, meanings = defaultdict(list), defaultdict(set)
        for source in sources:
            for name, meaning in internal_names(source):
                owners[name].append(source)
                meanings[name].add(meaning)
        for name, files in sorted(owners.items()):
            if len(files) > 1 and (not name.startswith("alias") or len(meanings[name]) > 1):
                shared.append(f"{Path(target).name}: {name} in " +
                              ", ".join(str(f) for f in files))
    return shared


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--self-test"]:
        if self_test() != 0:
            return 1
        argv = argv[1:]
        if len(argv) == 1:
            return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    shared = shared_names(Path(argv[1]))
    for line in shared:
        print(line)
    if shared:
        print(f"{len(shared)} name(s) with internal linkage defined in two sources of one "
              "target: rename one (a unity build puts them in one translation unit)")
    return 1 if shared else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
