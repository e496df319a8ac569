"""Draw which GPU thread writes which address of ``hermite_norm``'s result on the cuda target.

Writes ``docs/images/hermite-layout.svg`` and the table between the ``hermite-layout`` markers
of ``docs/hermite.md``, both from the library's own layout code, so the figure cannot drift
from what the GPU does (``tests/test_docs.py`` fails when they are stale):

- the output of a gufunc call on cuda is allocated by ``targets/cuda/device.py`` with the axes
  order of ``_output_axes`` (core dimensions outermost) through ``launch.Layout.contiguous``;
- ``targets/cuda/kernels.py``'s ``gufunc_kernel`` runs one loop element (sample) per thread,
  ``i = cuda.grid(1)``, which writes the ``n`` orders of its sample.

    python docs/hermite_layout.py           # rewrite the figure and the table
    python docs/hermite_layout.py --check   # exit 1 if either is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

DOCS = Path(__file__).resolve().parent
FIGURE = DOCS / "images" / "hermite-layout.svg"
PAGE = DOCS / "hermite.md"
START, END = "<!-- hermite-layout:start -->", "<!-- hermite-layout:end -->"

#: The drawn call: ``hermite_norm(x, ORDERS)`` on ``SAMPLES`` float64 samples.
SAMPLES, ORDERS = 8, 4
#: One colour per order ``k``: the stores of one step of the threads' loop.
COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948")


def element_strides(samples: int = SAMPLES, orders: int = ORDERS) -> dict[str, tuple[int, ...]]:
    """Element strides of the result of ``hermite_norm(x, orders)`` for ``samples`` float64
    samples: on cuda as its executor allocates it, and on cpu as NumPy's C order."""
    sys.path.insert(0, str(DOCS.parent))  # this checkout's gpufuncs, run from anywhere
    import gpufuncs as gf
    from gpufuncs.targets.cuda.device import _output_axes
    from gpufuncs.targets.cuda.launch import Layout

    x = np.zeros(samples)
    kernel = gf.hermite_norm
    plan = kernel.resolve(x, orders, target="cpu").plan  # validation is the same for every target
    shape = plan.out_shapes[0]
    cuda = Layout.contiguous(shape, x.dtype, _output_axes(kernel.spec, plan, shape), core=1)
    cpu = kernel(x, orders, target="cpu")
    return {name: tuple(s // x.itemsize for s in strides)
            for name, strides in (("cuda", cuda.strides), ("cpu", cpu.strides))}


def addresses(strides: tuple[int, ...], samples: int = SAMPLES, orders: int = ORDERS) -> np.ndarray:
    """``a[i, k]``: element offset written by thread ``i`` (sample ``i``) for order ``k``."""
    i, k = np.meshgrid(np.arange(samples), np.arange(orders), indexing="ij")
    return i * strides[0] + k * strides[1]


def svg(strides: dict[str, tuple[int, ...]]) -> str:
    """The figure: one row of cells per layout, one cell per element offset, coloured by order."""
    cell, left, size = 26, 10, SAMPLES * ORDERS
    width = left + size * cell + 10
    rows = (("cuda", "on cuda: order-major buffer, returned as its transposed view",
             "each step k of the threads' loop stores one contiguous run: coalesced"),
            ("cpu", "C order, as on cpu",
             f"if threads stored it, neighbouring threads would write n = {ORDERS} elements apart"))
    row_height, top = 112, 78
    height = top + len(rows) * row_height + 24
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="14">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="20" font-size="16" font-weight="bold">hermite_norm(x, {ORDERS}), '
           f'{SAMPLES} samples: thread ti computes sample i</text>',
           f'<text x="{left}" y="40" fill="#444">cell = one element of the result, at its offset in '
           'the buffer; label = the thread that stores it; colour = the order k</text>']
    for r, (name, title, note) in enumerate(rows):
        y = top + r * row_height + 22
        out.append(f'<text x="{left}" y="{y - 24}" font-weight="bold">{title} (element strides '
                   f'{strides[name]})</text>')
        where = addresses(strides[name])
        for i in range(SAMPLES):
            for k in range(ORDERS):
                x = left + int(where[i, k]) * cell
                out.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" '
                           f'fill="{COLOURS[k % len(COLOURS)]}" stroke="white"/>')
                out.append(f'<text x="{x + cell / 2}" y="{y + 18}" text-anchor="middle" '
                           f'font-size="12" fill="white">t{i}</text>')
        for a in range(0, size, SAMPLES):
            out.append(f'<text x="{left + a * cell + 2}" y="{y - 5}" font-size="11" fill="#666">{a}</text>')
        out.append(f'<text x="{left}" y="{y + cell + 20}" fill="#444">{note}</text>')
    legend_y = top + len(rows) * row_height - 4
    for k in range(ORDERS):
        x = left + k * 80
        out.append(f'<rect x="{x}" y="{legend_y}" width="14" height="14" fill="{COLOURS[k]}"/>')
        out.append(f'<text x="{x + 20}" y="{legend_y + 12}">k = {k}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def table(strides: dict[str, tuple[int, ...]]) -> str:
    """The same data as a table: element offset written by each thread at each order."""
    cuda, cpu = addresses(strides["cuda"]), addresses(strides["cpu"])
    head = "| thread (sample) | " + " | ".join(f"k = {k}" for k in range(ORDERS)) + " |"
    lines = [head, "|" + " --- |" * (ORDERS + 1)]
    for i in range(SAMPLES):
        cells = " | ".join(f"{cuda[i, k]} ({cpu[i, k]})" for k in range(ORDERS))
        lines.append(f"| t{i} | {cells} |")
    return "\n".join(lines)


def page_with_table(page: str, strides: dict[str, tuple[int, ...]]) -> str:
    """``page`` with the text between the markers replaced by the generated table."""
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(strides)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    opts = parser.parse_args(argv)
    strides = element_strides()
    wanted = {FIGURE: svg(strides), PAGE: page_with_table(PAGE.read_text(), strides)}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if opts.check:
        for path in stale:
            print(f"{path} is stale: run python docs/hermite_layout.py", file=sys.stderr)
        return 1 if stale else 0
    FIGURE.parent.mkdir(exist_ok=True)
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
