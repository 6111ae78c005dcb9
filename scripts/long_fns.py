#!/usr/bin/env python3
"""Print every Rust function longer than a limit, longest first.

A function's length is counted from the line holding its `fn` keyword to the
line holding its closing brace, both included. Braces inside string, raw
string and char literals and inside comments are not counted, so a `{` in a
format string does not end (or extend) a function. Declarations without a
body (`fn f();` in a trait) are skipped.

Usage: scripts/long_fns.py [--limit N] [--all] DIR_OR_FILE...
Exit status 1 when some function is over the limit (0 otherwise), so the
script can guard CI.
"""
import argparse
import os
import re
import sys

FN = re.compile(r"(?:^|[\s;{}()])fn\s+([A-Za-z_][A-Za-z0-9_]*)")


def code_only(text):
    """The text with comments and literals blanked out, newlines kept."""
    out = []
    i, n = 0, len(text)
    depth_block = 0
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if depth_block:
            if c == "/" and nxt == "*":
                depth_block += 1
                out.append("  ")
                i += 2
            elif c == "*" and nxt == "/":
                depth_block -= 1
                out.append("  ")
                i += 2
            else:
                out.append("\n" if c == "\n" else " ")
                i += 1
            continue
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c == "/" and nxt == "*":
            depth_block = 1
            out.append("  ")
            i += 2
            continue
        # raw strings: r"..", r#".."#, br#".."#
        m = re.match(r'b?r(#*)"', text[i:i + 260])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        if c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", text[i:i + 16])
            if m:
                out.append(" " * m.end())
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    """(name, first line, last line) of each function with a body."""
    with open(path, encoding="utf-8") as f:
        code = code_only(f.read())
    line_starts = [0]
    for k, ch in enumerate(code):
        if ch == "\n":
            line_starts.append(k + 1)

    def line_of(pos):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    for m in FN.finditer(code):
        start = m.start(1)
        # The body opens at the first `{` outside parentheses/brackets, unless
        # a `;` comes first (a declaration). Generic `<..>` holds no braces.
        k, paren = m.end(), 0
        while k < len(code):
            ch = code[k]
            if ch in "([":
                paren += 1
            elif ch in ")]":
                paren -= 1
            elif paren == 0 and ch == ";":
                k = -1
                break
            elif paren == 0 and ch == "{":
                break
            k += 1
        if k < 0 or k >= len(code):
            continue
        depth = 0
        while k < len(code):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        yield m.group(1), line_of(start), line_of(k)


def rust_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, _dirs, files in os.walk(p):
            for f in sorted(files):
                if f.endswith(".rs"):
                    yield os.path.join(root, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    rows = []
    for path in rust_files(args.paths):
        for name, first, last in functions(path):
            length = last - first + 1
            if length > args.limit:
                rows.append((length, f"{path}:{first}", name))
    rows.sort(key=lambda r: (-r[0], r[1]))
    for length, where, name in rows:
        print(f"{length:5}  {where}  {name}")
    if not rows:
        print(f"no function over {args.limit} lines")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
