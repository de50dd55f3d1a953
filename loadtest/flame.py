"""A flame graph from `perf script` output, with no tool but Python.

    perf record -e cpu-clock -F 997 --call-graph dwarf -p PID -o perf.data -- sleep 10
    perf script -i perf.data | python3 loadtest/flame.py TITLE OUT.svg [OUT.folded]

Stacks are folded (root first, one line per distinct stack with its sample count), names
shortened (Rust's hash suffix and generic arguments dropped), and drawn as a flame graph: a
box's width is its share of the samples; hovering shows the name and the share. The folded
file is what inferno or Brendan Gregg's flamegraph.pl would also take.
"""

import html
import re
import sys
from collections import Counter

HASH = re.compile(r"::h[0-9a-f]{16}$")


def short(name):
    name = HASH.sub("", name)
    # Generic arguments and closures' decorations make names long without telling more.
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<…>")
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out).replace("{{closure}}", "{closure}")


def fold(lines):
    stacks, frames, comm = Counter(), [], None
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if frames or comm:
                stacks[";".join([comm or "?"] + [short(f) for f in reversed(frames)])] += 1
            frames, comm = [], None
        elif line[0] not in " \t":
            comm = line.split()[0]
        else:
            parts = line.strip().split(" ", 1)
            if len(parts) == 2:
                sym = re.sub(r"\s+\(.*\)$", "", parts[1])
                sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
                frames.append(sym)
    if frames or comm:
        stacks[";".join([comm or "?"] + [short(f) for f in reversed(frames)])] += 1
    return stacks


def tree(stacks):
    root = {"n": 0, "kids": {}}
    for stack, n in stacks.items():
        node = root
        node["n"] += n
        for frame in stack.split(";"):
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += n
    return root


def colour(name):
    h = sum(map(ord, name)) % 60
    if name.startswith(("seckill", "<seckill")):
        return f"rgb(230,{90 + h},50)"
    if "sqlx" in name or "tokio" in name or "hyper" in name:
        return f"rgb(220,{140 + h},60)"
    return f"rgb(200,{170 + h // 2},{90 + h})"


def svg(root, title, width=1200, row=16):
    total = max(root["n"], 1)
    boxes, depth_max = [], 0

    def walk(node, name, x, depth):
        nonlocal depth_max
        w = node["n"] / total * width
        if w < 0.3:
            return
        depth_max = max(depth_max, depth)
        boxes.append((x, depth, w, name, node["n"]))
        cx = x
        for kid, child in sorted(node["kids"].items()):
            walk(child, kid, cx, depth + 1)
            cx += child["n"] / total * width

    walk(root, "all", 0, 0)
    height = (depth_max + 1) * row + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="monospace" font-size="11">',
           '<rect width="100%" height="100%" fill="#fff"/>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14" '
           f'font-family="sans-serif">{html.escape(title)} ({total} samples)</text>']
    for x, depth, w, name, n in boxes:
        y = height - (depth + 1) * row - 4
        label = html.escape(name)
        out.append(f'<g><title>{label} ({n} samples, {n / total:.1%})</title>'
                   f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row - 1}" '
                   f'fill="{colour(name)}"/>')
        chars = int(w / 7)
        if chars >= 3:
            text = name if len(name) <= chars else name[:chars - 1] + "…"
            out.append(f'<text x="{x + 2:.2f}" y="{y + row - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    title, out = sys.argv[1], sys.argv[2]
    stacks = fold(sys.stdin)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            for stack, n in sorted(stacks.items()):
                f.write(f"{stack} {n}\n")
    with open(out, "w") as f:
        f.write(svg(tree(stacks), title))


if __name__ == "__main__":
    main()
