#!/usr/bin/env python3
"""The library is a unity build (src/CMakeLists.txt): several sources share one translation unit, so the private
helpers of one source (its anonymous namespace, or `static` functions) meet the others'. Two helpers of the same name
and signature fail to compile; the silent case is the same name and arity with other arithmetic parameter types
(`sigmoid(float)` in one source, `sigmoid(double)` in another): a call then goes to whichever overload fits better,
without a word. This check finds such pairs among the top-level function definitions in src/vision and fails on any.

  tools/check-private-names.py [SRC_DIR]     (default: src/vision; exit 1 on a finding)
"""
import collections
import pathlib
import re
import sys

ARITHMETIC = re.compile(r"^(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:bool|char|short|int|long|long long|float|double|"
                        r"size_t|ptrdiff_t|u?int(?:8|16|32|64)_t|std::size_t|std::u?int(?:8|16|32|64)_t|DType|Layout)"
                        r"(?:\s*&)?$")
# A definition at column 0: optional specifiers, a return type, the name, then its parameter list.
DEF = re.compile(r"^(?:static\s+|inline\s+|constexpr\s+|\[\[nodiscard\]\]\s+)*[A-Za-z_][\w:<>,\s\*&]*?[\s\*&]"
                 r"([a-z_]\w*)\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(?:const\s*)?(?:noexcept\s*)?\{")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "namespace", "catch"}


def params(text):
    """The parameter types of a parameter list (names and default values dropped)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    types = []
    for p in out:
        p = p.split("=")[0].strip()
        p = re.sub(r"\s+", " ", p)
        m = re.match(r"^(.*?[\s\*&])([A-Za-z_]\w*)$", p)  # drop the parameter's name
        types.append((m.group(1) if m else p).strip())
    return tuple(types)


def private_definitions(path):
    """(name, parameter types) of each function defined at column 0 inside an anonymous namespace or `static`."""
    anon_depth = 0
    found = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^namespace\s*\{", line):
            anon_depth += 1
            continue
        if anon_depth and re.match(r"^\}\s*//\s*namespace\s*$", line):
            anon_depth -= 1
            continue
        if not line or line[0] in " \t#/}":
            continue
        text = line
        for extra in lines[i + 1:i + 4]:  # a signature over up to four lines
            if "{" in text or ";" in text:
                break
            text += " " + extra.strip()
        m = DEF.match(text)
        if not m or m.group(1) in KEYWORDS:
            continue
        if anon_depth or text.startswith("static "):
            found.append((m.group(1), params(m.group(2))))
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src/vision")
    by_name = collections.defaultdict(set)
    for path in sorted(root.rglob("*.cpp")):
        for name, types in private_definitions(path):
            by_name[name].add((str(path), types))
    findings = []
    for name, defs in sorted(by_name.items()):
        defs = sorted(defs)
        for a in range(len(defs)):
            for b in range(a + 1, len(defs)):
                (fa, ta), (fb, tb) = defs[a], defs[b]
                if fa == fb or len(ta) != len(tb) or ta == tb:
                    continue
                differ = [(x, y) for x, y in zip(ta, tb) if x != y]
                if all(ARITHMETIC.match(x) and ARITHMETIC.match(y) for x, y in differ):
                    findings.append(f"{name}: {fa} takes ({', '.join(ta)}), {fb} takes ({', '.join(tb)})")
    for f in findings:
        print("check-private-names: " + f)
    if findings:
        print("check-private-names: give these private helpers distinct names (the library is a unity build)")
        return 1
    print(f"check-private-names: {sum(len(v) for v in by_name.values())} private functions, no overload across sources")
    return 0


if __name__ == "__main__":
    sys.exit(main())
