"""The pieces every chart here is drawn from: the document, text (escaped), shapes, axes and
a legend. Hand-written SVG, no plotting library; each piece is one element as a string."""

import html
from collections.abc import Iterable


def esc(words: object) -> str:
    """Text made safe inside an element or an attribute's quotes."""
    return html.escape(str(words), quote=True)


def _value(v: object) -> str:
    # Coordinates to two decimals at most: a chart needs no more, and the files stay small.
    return f"{v:.2f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


def attrs(**named: object) -> str:
    """`name="value"` pairs, escaped; `font_size` is written `font-size`, `class_` `class`;
    None leaves a pair out."""
    return " ".join(f'{k.rstrip("_").replace("_", "-")}="{esc(_value(v))}"'
                    for k, v in named.items() if v is not None)


def element(tag: str, content: str | None = None, /, **named: object) -> str:
    """`<tag .../>`, or `<tag ...>content</tag>` (content already SVG: escape text first)."""
    head = f"<{tag} {attrs(**named)}".rstrip()
    return f"{head}/>" if content is None else f"{head}>{content}</{tag}>"


def text(x: float, y: float, words: object, **named: object) -> str:
    return element("text", esc(words), x=x, y=y, **named)


def rect(x: float, y: float, width: float, height: float, fill: str, **named: object) -> str:
    return element("rect", x=x, y=y, width=width, height=height, fill=fill, **named)


def line(x1: float, y1: float, x2: float, y2: float, stroke: str = "#333",
         **named: object) -> str:
    return element("line", x1=x1, y1=y1, x2=x2, y2=y2, stroke=stroke, **named)


def polyline(points: Iterable[tuple[float, float]], stroke: str, width: float = 2) -> str:
    return element("polyline", points=" ".join(f"{x:.1f},{y:.1f}" for x, y in points),
                   fill="none", stroke=stroke, stroke_width=width)


def circle(cx: float, cy: float, r: float, fill: str) -> str:
    return element("circle", cx=cx, cy=cy, r=r, fill=fill)


def group(children: Iterable[str], **named: object) -> str:
    return element("g", "".join(children), **named)


def tooltip(words: object) -> str:
    """A `<title>`: what hovering over its parent shows."""
    return element("title", esc(words))


def axes(left: float, top: float, right: float, bottom: float,
         stroke: str = "#333") -> list[str]:
    """The x axis along `bottom` and the y axis along `left`."""
    return [line(left, bottom, right, bottom, stroke), line(left, top, left, bottom, stroke)]


def legend(items: Iterable[tuple[str, str]], x: float, y: float, step: float,
           swatch: tuple[float, float] = (10, 10), **named: object) -> list[str]:
    """A swatch of each (label, colour) and its label, side by side from (x, y), `step`
    apart; `named` goes to the labels (font_size...)."""
    width, height = swatch
    out = []
    for i, (label, colour) in enumerate(items):
        at = x + i * step
        out += [rect(at, y, width, height, colour),
                text(at + width + 4, y + height / 2 + 4, label, **named)]
    return out


def document(width: float, height: float, body: Iterable[str], font: str = "sans-serif",
             size: int = 12, background: str = "white") -> str:
    """The whole file: the svg element, a background, `body`, one piece a line."""
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" '
            f'{attrs(width=width, height=height, font_family=font, font_size=size)}>')
    back = element("rect", width="100%", height="100%", fill=background)
    return "\n".join([head, back, *body, "</svg>"]) + "\n"
