"""Calibrated similarity: one scale for the cosines of every embedding model.

Raw cosines are not comparable between models. all-MiniLM-L6-v2 gives unrelated
English sentences about 0.1; multilingual-e5-small gives them about 0.8. The
hybrid weights (0.6 vector) and the dedup threshold (0.85) need a scale on which
a number means the same thing whatever the model, so each embedder carries a
:class:`Calibration` that maps its raw cosine to the *common scale*:

==========================================  ==============
pairs of memories (labelled, shipped)       common scale
==========================================  ==============
median of unrelated pairs                   :data:`UNRELATED` (0.10)
median of related pairs (same subject,      :data:`RELATED` (0.50)
another fact)
10th percentile of paraphrase pairs (90%    :data:`DUPLICATE` (0.85)
of them merge at the default threshold),
at least the 99th of unrelated pairs and,
for the memory curve, the 95th of distinct
events (see :func:`dedup_cut`)
==========================================  ==============

plus ``-1 -> -1`` and ``1 -> 1``, linear in between (so the map is monotone and
has an inverse). These anchors are where all-MiniLM-L6-v2 puts English pairs,
which is the scale the default weights and threshold were chosen on, so its
calibration is close to the identity.

A calibration has two curves: ``memory`` for memory-to-memory cosines (dedup
on store) and ``query`` for query-to-memory cosines (search). They differ for
models that embed queries and memories differently (e5's ``query:`` and
``passage:`` prefixes); for the others they are the same curve.

A model fitted on several languages also carries a memory curve per language
(``memory_langs``), each fitted on that language's pairs alone. A multilingual
model does not put the pairs of every language equally close: on the memory curve
of both, multilingual-e5-small's median related Chinese pair is at 0.64 and its
English one at 0.24, so a calibrated cut does not mean the same in both: it sits
nearer the related Chinese pairs than the related English ones, and merges or
judges Chinese memories more readily. Dedup judges a new memory on the curve
of its language (:meth:`Calibration.dedup_threshold`), and falls back to the curve
of all languages for a language without one.

Calibrations for the local models ship in ``data/calibrations.json``; they
are re-derived, and a user's own model (litellm) is calibrated, with::

    python -m dream_memory_actor.embedding.calibrate --model local:multilingual-e5-small

The labelled pairs (``data/pairs.tsv``, English and Chinese) are split into a
fit part and a held-apart test part (every third group), so the merge rates
printed by that command are measured on pairs the curves were not fitted on.

``data/distinct.tsv`` adds *distinct* pairs: two events of the same template
with another person, place, date or amount ("deployed to the Beijing region on
Tuesday" / "... Shanghai region on Thursday"). Models put them close, closer
than many paraphrases in Chinese (multilingual-e5-small merged a quarter of
them at a cut set by paraphrases and unrelated pairs alone), and merging them
loses an event. So the memory curve's :data:`DUPLICATE` anchor is also at
least their :data:`DISTINCT_QUANTILE` quantile: dedup merges fewer paraphrases
rather than distinct events. The query curve leaves them out: for search, a
distinct event of the same kind is a relevant memory.
"""

from __future__ import annotations

import bisect
import itertools
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigurationError

__all__ = [
    "DISTINCT_QUANTILE",
    "DUPLICATE",
    "IDENTITY",
    "RELATED",
    "UNRELATED",
    "Calibration",
    "Curve",
    "Pair",
    "dedup_cut",
    "fit_curve",
    "labelled_pairs",
    "load_calibration",
    "shipped_calibration",
]

#: Where the common scale puts the median unrelated pair.
UNRELATED = 0.10
#: Where the common scale puts the median related pair (same subject, another fact).
RELATED = 0.50
#: Where the common scale puts the paraphrase cut: the default dedup threshold.
DUPLICATE = 0.85
#: Share of the labelled paraphrase pairs below the :data:`DUPLICATE` anchor.
PARAPHRASE_QUANTILE = 0.10
#: The :data:`DUPLICATE` anchor is never below this quantile of the unrelated pairs.
UNRELATED_QUANTILE = 0.99
#: ... nor, on the memory curve, below this quantile of the distinct pairs.
DISTINCT_QUANTILE = 0.95

Label = Literal["unrelated", "related", "paraphrase", "distinct"]
Split = Literal["fit", "test"]


@dataclass(frozen=True)
class Curve:
    """A monotone piecewise linear map from raw cosine to the common scale."""

    xs: tuple[float, ...] = (-1.0, 1.0)
    ys: tuple[float, ...] = (-1.0, 1.0)

    def __post_init__(self) -> None:
        if len(self.xs) != len(self.ys) or len(self.xs) < 2:
            raise ConfigurationError("a calibration curve needs at least two (x, y) anchors")
        if self.xs[0] != -1.0 or self.xs[-1] != 1.0:
            raise ConfigurationError("a calibration curve must span raw cosines -1 to 1")
        for seq in (self.xs, self.ys):
            if any(b <= a for a, b in itertools.pairwise(seq)):
                raise ConfigurationError(
                    f"calibration anchors must be strictly increasing, got {list(seq)}")

    @property
    def is_identity(self) -> bool:
        return self.xs == self.ys

    def __call__(self, raw: float) -> float:
        """The calibrated value of a raw cosine (clamped to [-1, 1] first)."""
        return _interpolate(self.xs, self.ys, raw)

    def inverse(self, value: float) -> float:
        """The raw cosine whose calibrated value is ``value`` (the curve is monotone, so
        the same interpolation with the axes swapped)."""
        return _interpolate(self.ys, self.xs, value)

    def to_json(self) -> list[list[float]]:
        return [[round(x, 6), round(y, 6)] for x, y in zip(self.xs, self.ys, strict=True)]

    @classmethod
    def from_json(cls, anchors: Sequence[Sequence[float]]) -> Curve:
        try:
            xs = tuple(float(a[0]) for a in anchors)
            ys = tuple(float(a[1]) for a in anchors)
        except (TypeError, ValueError, IndexError) as exc:
            raise ConfigurationError(f"calibration anchors must be [x, y] pairs: {exc}") from exc
        return cls(xs, ys)


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """The piecewise-linear function through ``(xs[i], ys[i])`` at ``x``, flat outside."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class Calibration:
    """The curves of one model: ``memory`` (dedup) and ``query`` (search)."""

    model: str
    memory: Curve = field(default_factory=Curve)
    query: Curve = field(default_factory=Curve)
    #: Memory curves fitted on one language's pairs alone, by language: a multilingual
    #: model puts the pairs of one language much closer than another's (e5's related
    #: Chinese pairs sit where its English paraphrases do), so a calibrated cut means
    #: the same in each only on its own language's curve.
    memory_langs: tuple[tuple[str, Curve], ...] = ()

    @property
    def is_identity(self) -> bool:
        return self.memory.is_identity and self.query.is_identity

    def memory_for(self, lang: str | None) -> Curve:
        """The memory curve of ``lang``, or the curve of all languages."""
        return dict(self.memory_langs).get(lang or "", self.memory)

    def dedup_threshold(self, calibrated: float, lang: str | None = None) -> float:
        """The raw memory-to-memory cosine equivalent to a calibrated threshold (on the
        curve of ``lang`` when the calibration has one)."""
        return self.memory_for(lang).inverse(calibrated)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "memory": self.memory.to_json(),
                               "query": self.query.to_json()}
        if self.memory_langs:
            out["memory_langs"] = {lang: c.to_json() for lang, c in self.memory_langs}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibration:
        if not isinstance(data, Mapping) or "memory" not in data:
            raise ConfigurationError("a calibration is an object with 'model', 'memory', 'query'")
        memory = Curve.from_json(data["memory"])
        query = Curve.from_json(data["query"]) if "query" in data else memory
        langs = data.get("memory_langs") or {}
        if not isinstance(langs, Mapping):
            raise ConfigurationError("a calibration's 'memory_langs' maps languages to curves")
        return cls(str(data.get("model", "")), memory, query,
                   tuple((str(k), Curve.from_json(v)) for k, v in sorted(langs.items())))


#: What an embedder without a fitted calibration uses: raw cosine as it is.
IDENTITY = Calibration("identity")


# -- the labelled pairs -------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """Two memory texts and how they relate."""

    a: str
    b: str
    label: Label
    lang: str
    split: Split


#: Each group's base text is paired with the bases of the groups this far ahead
#: (skipping groups of the same topic) to make the unrelated pairs.
UNRELATED_OFFSETS = (7, 19, 31)


def _rows(name: str, columns: int) -> list[list[str]]:
    text = resources.files(__package__).joinpath(f"data/{name}").read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    for row in rows:
        if len(row) != columns:
            raise ConfigurationError(f"data/{name}: a row must have {columns} columns: {row!r}")
    return rows


def _distinct(split: Split | None, wanted: set[str] | None) -> list[Pair]:
    """The distinct pairs; every third of each language (index 2, 5, ...) is ``"test"``."""
    out: list[Pair] = []
    seen: dict[str, int] = {}
    for lang, a, b in _rows("distinct.tsv", 3):
        i = seen[lang] = seen.get(lang, -1) + 1
        part: Split = "test" if i % 3 == 2 else "fit"
        if (wanted is None or lang in wanted) and (split is None or part == split):
            out.append(Pair(a, b, "distinct", lang, part))
    return out


def labelled_pairs(split: Split | None = None, langs: Iterable[str] | None = None
                   ) -> list[Pair]:
    """The shipped pairs (``data/distinct.tsv`` last), optionally of one split and some
    languages.

    Every third group of each language (index 2, 5, 8, ...) is held apart as
    ``"test"``; unrelated pairs are made within a split, so no test text is seen
    while fitting.
    """
    wanted = None if langs is None else set(langs)
    out: list[Pair] = []
    by_lang: dict[str, list[list[str]]] = {}
    for row in _rows("pairs.tsv", 5):
        by_lang.setdefault(row[0], []).append(row)
    for lang, rows in by_lang.items():
        if wanted is not None and lang not in wanted:
            continue
        parts: tuple[Split, ...] = ("fit", "test")
        for part in parts:
            if split is not None and part != split:
                continue
            groups = [r for i, r in enumerate(rows) if (i % 3 == 2) == (part == "test")]
            n = len(groups)
            for i, (_, topic, base, para, related) in enumerate(groups):
                out.append(Pair(base, para, "paraphrase", lang, part))
                out.append(Pair(base, related, "related", lang, part))
                for k in UNRELATED_OFFSETS:
                    j = (i + k) % n
                    while groups[j][1] == topic:
                        j = (j + 1) % n
                    out.append(Pair(base, groups[j][2], "unrelated", lang, part))
    return out + _distinct(split, wanted)


# -- fitting ----------------------------------------------------------------------


def _quantile(values: Sequence[float], q: float) -> float:
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def dedup_cut(scores: Mapping[str, Sequence[float]]) -> float:
    """The raw cosine put at :data:`DUPLICATE`: the :data:`PARAPHRASE_QUANTILE`
    quantile of the paraphrase pairs (so that share of paraphrases falls below
    it), raised to the :data:`UNRELATED_QUANTILE` quantile of the unrelated pairs
    when those reach higher (a model that cannot tell them apart merges fewer
    paraphrases rather than unrelated memories), and to the
    :data:`DISTINCT_QUANTILE` quantile of the ``"distinct"`` pairs when given."""
    cut = max(_quantile(scores["paraphrase"], PARAPHRASE_QUANTILE),
              _quantile(scores["unrelated"], UNRELATED_QUANTILE))
    if scores.get("distinct"):
        cut = max(cut, _quantile(scores["distinct"], DISTINCT_QUANTILE))
    return cut


def fit_curve(scores: Mapping[str, Sequence[float]]) -> Curve:
    """The curve through the anchors of the module doc, fitted on labelled raw cosines
    (``"distinct"`` scores, when given, only raise the :data:`DUPLICATE` anchor).

    An anchor that would break monotonicity (a model that ranks related pairs
    above its paraphrase cut, say) is left out.
    """
    for label in ("unrelated", "related", "paraphrase"):
        if not scores.get(label):
            raise ConfigurationError(f"fitting a calibration needs {label} pairs")
    anchors = [
        (statistics.median(scores["unrelated"]), UNRELATED),
        (statistics.median(scores["related"]), RELATED),
        (dedup_cut(scores), DUPLICATE),
    ]
    xs, ys = [-1.0], [-1.0]
    for x, y in sorted(anchors, key=lambda a: a[1]):
        if xs[-1] < x < 1.0:
            xs.append(x)
            ys.append(y)
    xs.append(1.0)
    ys.append(1.0)
    return Curve(tuple(xs), tuple(ys))


# -- shipped and user calibrations --------------------------------------------------


def _shipped() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data/calibrations.json").read_text(
        encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def shipped_calibration(model: str) -> Calibration | None:
    """The calibration shipped for ``model`` (e.g. ``"local:multilingual-e5-small"``)."""
    entry = _shipped().get("models", {}).get(model)
    return None if entry is None else Calibration.from_json(entry)


def load_calibration(path: str | Path) -> Calibration:
    """A calibration written by ``python -m dream_memory_actor.embedding.calibrate``."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the calibration file {str(p)!r}: {exc}") from exc
    return Calibration.from_json(data)
