"""What a softmax card says that both softmax.py's choices and its sources read: whether it is a fused
``kforge.softmax`` (a prologue over inputs x0..xk), the dtype the softmax sees, the launch order of rows that share a
broadcast input row, and the element the relay moves."""
from __future__ import annotations

from ...cards import OperatorCard
from ...expression import SOFTMAX_OP, parse, result_dtype
from .common import ITEMSIZE, main_input, output_spec, row_order

# The packed pair of each 16-bit element type: the relay's max over pairs (Note [a lean reduce] in softmax_relay.py).
PAIRS = {"bfloat16": "__nv_bfloat162", "float16": "__half2"}


def is_fused(card: OperatorCard) -> bool:
    return card.op == SOFTMAX_OP


def in_dtype(card: OperatorCard) -> str:
    """The dtype the softmax reads: its input's, or the prologue expression's result."""
    if is_fused(card):
        return result_dtype(parse(str(card.scalars["expr"])), [t.spec.dtype for t in card.inputs])
    return main_input(card).dtype


def launch_order(card: OperatorCard) -> list[int] | None:
    """The launch order of the rows where a fused input broadcasts over some of them (Note [rows that share a
    broadcast row run together] in common.py), else None."""
    return row_order(output_spec(card, 0), [t.spec for t in card.inputs]) if is_fused(card) else None


def relay_dtype(card: OperatorCard) -> str:
    """The element the relay moves: its input's as it is in memory (a fused prologue's runs on chip)."""
    return card.inputs[0].spec.dtype if is_fused(card) else main_input(card).dtype


def relay_isz(card: OperatorCard) -> int:
    """Bytes of one element the relay moves (``relay_dtype``)."""
    return ITEMSIZE[relay_dtype(card)]


def relay_pair(card: OperatorCard, once: bool) -> str | None:
    """The pair type the relay's reduce takes its max over (Note [a lean reduce] in softmax_relay.py): where the packs
    hold 16-bit values that are the softmax's own (no prologue, or one evaluated once into them), else None."""
    return PAIRS.get(relay_dtype(card)) if once or not is_fused(card) else None
