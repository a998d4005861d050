"""Reading cuobjdump's SASS in tests: the text of each function, and a kernel's compute loop."""

import re


def by_function(sass: str) -> dict[str, str]:
    """SASS text per function (cuobjdump prints `Function : <mangled name>` before each)."""
    parts = re.split(r"\n\s*Function : (\S+)", sass)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def compute_loop(body: str) -> str:
    """The innermost loop with the compute's FMAs (a backward branch around >= 16 FFMAs), addresses and
    branch targets blanked."""
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)]
    best = None
    for at, text in ins:
        m = re.search(r"BRA .*0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < at:
            loop = [t for a, t in ins if int(m.group(1), 16) <= a <= at]
            if sum("FFMA" in t for t in loop) >= 16 and (best is None or len(loop) < len(best)):
                best = loop
    assert best is not None, "no compute loop found"
    return "\n".join(re.sub(r"0x[0-9a-f]+", "X", t) for t in best)
