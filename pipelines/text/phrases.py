"""Relation phrases: how a question says each hop, written once per domain in an editable file.

A question walks a path one relation at a time, and every form the writer uses (docs/qa.md, "How
template questions read") needs up to five phrasings of a relation, with ``{head}``/``{tail}`` for its
two ends and ``{type}`` for the noun of the entity asked for or described:

    statement  "{head} is the capital of {tail}"          a plain sentence, both ends noun phrases
    ask_tail   "Which {type} is {head} the capital of?"   asks for the tail, the head named
    ask_head   "Which {type} is the capital of {tail}?"   asks for the head
    tail_noun  "the {type} whose capital is {head}"       the tail described through the head
    head_noun  "the capital of {tail}"                    the head described through the tail

``kg_assets/<domain>/phrases.yaml`` holds them per relation label (``omne qa phrases`` drafts it by the
rules below, a user fixes a phrase there once). A label the file does not list is phrased by the
same rules at build time: the statement from the relations' own description sentences when most of
them say it the same way, else from the label ("in block" -> "{head} is in block {tail}"); the other
forms from the statement. Graphs whose labels are not shared relation names (LightRAG's keyword
lists, LLM-extracted text) are phrased per edge instead: the edge's own description sentence that
names both ends, never its keywords; an edge without such a sentence makes no question.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from pipelines.errors import ConfigError
from pipelines.text.names import STOPWORDS, find_name

PHRASES_FILE = "phrases.yaml"
BE = {"is", "are", "was", "were"}
AUXILIARIES = {"does", "do", "did"}
MODALS = {"can", "could", "may", "might", "must", "shall", "should", "will", "would"}
ARTICLES = {"the", "a", "an"}
PREPOSITIONS = {"of", "in", "to", "by", "with", "for", "from", "on", "at", "into", "as", "about", "through",
                "within", "under", "over", "between", "among", "via", "toward", "towards", "onto", "upon"}
# LightRAG's generic entity types as a question names them: "Which place …", not "Which geo …"; a CATEGORY is any
# kind of thing ("Which category does Francium-221 decay to?" would ask for a category)
GENERIC_TYPE_NOUNS = {"geo": "place", "category": "entity"}
MAX_EDGE_SENTENCE_WORDS = 12  # a per-edge statement longer than this makes 3+-hop questions unreadable (LightRAG's
# descriptions run to 30 words: at 18, 3+-hop questions on real LightRAG graphs had a median of 44 words)
# words that cannot end the words between a per-edge statement's two ends ("{head} discusses how {tail}" asks "A person
# discusses how that concept."), and pronouns that point outside it ("… as it relates to {tail}")
_OPEN_CLAUSE = {"how", "that", "why", "what", "whether", "when", "where", "which", "who", "whom", "if", "because",
                "while", "and", "or", "but"}
_OUTSIDE_PRONOUNS = {"it", "its", "they", "them", "this", "these", "those"}
MIN_SHARED_PATTERN = 0.3  # share of a label's description sentences that must say it the same way
_POSSESSIVE_SLOT = re.compile(r"\}(?:'|\u2019)s?\b|(?:'|\u2019)s \{")  # "{head}'s …", "one's {tail}"
# a slot inside quotes or brackets: "the '{tail}' category" would ask "the 'which entity' category"
_QUOTED_SLOT = re.compile(r"[\"'\u2018\u201c(\[]\s*\{(?:head|tail)\}|\{(?:head|tail)\}\s*[\"'\u2019\u201d)\]]")
_SENTENCE_SPLIT = re.compile(r"<SEP>|\n|(?<=[.!?;])\s+(?=[A-Z\"'(])")
_SPACES = re.compile(r"\s+")
_TRAILING = re.compile(r"[\s.;:,!]+$")
_FIELDS = re.compile(r"\{(\w+)\}")
_ARTICLE_BEFORE = re.compile(r"(?i)(?:^|(?<=\s))(?:the|a|an)\s+$")


class RelationPhrases(BaseModel):
    """The phrasings of one relation (see the module's docstring); a missing form is not used."""

    model_config = ConfigDict(extra="forbid")
    statement: str
    ask_tail: str | None = None
    ask_head: str | None = None
    tail_noun: str | None = None
    head_noun: str | None = None

    @field_validator("statement")
    @classmethod
    def _both_ends(cls, value: str) -> str:
        if value.count("{head}") != 1 or value.count("{tail}") != 1:
            raise ValueError(f"{value!r}: a statement names {{head}} and {{tail}} once each")
        return value

    @model_validator(mode="after")
    def _fields(self) -> RelationPhrases:
        named = {"ask_tail": "head", "ask_head": "tail", "tail_noun": "head", "head_noun": "tail"}
        for name, end in named.items():
            text = getattr(self, name)
            if text is None:
                continue
            if not set(_FIELDS.findall(text)) <= {end, "type"} or text.count(f"{{{end}}}") != 1:
                raise ValueError(f"{name} {text!r}: names {{{end}}} once (and may use {{type}}), no other field")
            if name.startswith("ask") and not text.rstrip().endswith("?"):
                raise ValueError(f"{name} {text!r}: a question ends with '?'")
        return self


class PhraseLexicon(BaseModel):
    """A domain's phrases file: type nouns and relation phrases by label."""

    model_config = ConfigDict(extra="forbid")
    types: dict[str, str] = {}
    relations: dict[str, RelationPhrases] = {}


def read_lexicon(path: Path) -> PhraseLexicon:
    """The phrases file at ``path`` (empty when there is none); a broken file is an error naming it."""

    if not path.is_file():
        return PhraseLexicon()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return PhraseLexicon.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"{path}: {where}: {first['msg'].removeprefix('Value error, ')}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"{path}: not a valid phrases file: {exc}") from None


_HEADER = """\
# Relation phrases of the {domain!r} knowledge graph: how the offline question writer says each relation.
# Drafted by `omne qa phrases --domain {domain}` from the relation labels and descriptions; edit freely: the
# QA pairs are rebuilt when this file changes. {{head}}/{{tail}}: the relation's two ends; {{type}}: the noun
# of the entity asked for or described (the entity's type, renamed under `types:`). Forms:
#   statement  a sentence naming both ends          ask_tail  a question for the tail, the head named
#   ask_head   a question for the head              tail_noun the tail described through the head
#   head_noun  the head described through the tail  (a form left out is not used)
"""


def write_lexicon(path: Path, lexicon: PhraseLexicon, domain: str) -> None:
    data = lexicon.model_dump(exclude_none=True)
    text = _HEADER.format(domain=domain) + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# ------------------------------------------------------------------------------------------- rules


def base_verb(word: str) -> str | None:
    """The plain form of a third-person present verb ("decays" -> "decay"); None if ``word`` is not one."""
    w = word.lower()
    irregular = {"has": "have", "does": "do", "goes": "go"}
    if w in irregular:
        return irregular[w]
    if not w.isalpha() or len(w) < 4 or not w.endswith("s") or w.endswith(("ss", "us", "is")):
        return None
    if w.endswith("ies"):
        return w[:-3] + "y" if len(w) > 4 else w[:-1]  # "applies" -> "apply", but "lies" -> "lie"
    if w.endswith(("sses", "shes", "ches", "xes", "zzes", "oes")):
        return w[:-3] if w.endswith("zzes") else w[:-2]  # "quizzes" -> "quiz"; "symbolizes" -> "symbolize" below
    return w[:-1]


def _clean(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def drop_article(words: list[str]) -> list[str]:
    return words[:-1] if words and words[-1].lower() in ARTICLES else words


def _swap(text: str | None) -> str | None:
    if text is None:
        return None
    return text.replace("{head}", "\x00").replace("{tail}", "{head}").replace("\x00", "{tail}")


def derive_forms(statement: str) -> RelationPhrases:
    """Every form of a relation from its statement, by the rules of docs/qa.md. A statement that names the
    tail first ("{tail} is a language of {head}") gives the mirrored forms."""
    if statement.startswith("{tail} "):
        mirrored = _derive_head_first(_swap(statement) or statement)
        return RelationPhrases(statement=statement, ask_tail=_swap(mirrored.get("ask_head")),
                               ask_head=_swap(mirrored.get("ask_tail")), tail_noun=_swap(mirrored.get("head_noun")),
                               head_noun=_swap(mirrored.get("tail_noun")))
    return RelationPhrases.model_validate(_derive_head_first(statement))


def _derive_head_first(statement: str) -> dict[str, str | None]:
    forms: dict[str, str | None] = {"statement": statement}
    head_first = statement.startswith("{head} ")
    tail_last = statement.endswith("{tail}")
    if head_first:
        rest = statement[len("{head} "):]
        forms["ask_head"] = "Which {type} " + rest + "?"
        forms["head_noun"] = "the {type} that " + rest
    if head_first and tail_last:
        words = drop_article(statement[len("{head} "):-len("{tail}")].split())
        if words:
            first, rest = words[0], words[1:]
            if first.lower() in BE | MODALS | AUXILIARIES:  # "does not include" -> "Which … does X not include?"
                forms["ask_tail"] = _clean(f"Which {{type}} {first} {{head}} {' '.join(rest)}") + "?"
            elif (base := base_verb(first)) is not None:
                forms["ask_tail"] = _clean(f"Which {{type}} does {{head}} {base} {' '.join(rest)}") + "?"
            if rest and rest[-1].lower() in PREPOSITIONS:
                body = [first, *rest[:-1]]
                if rest[-1].lower() == "in" and len(body) == 1 and first.lower() in BE:
                    forms["tail_noun"] = "the {type} of {head}"  # "is in {tail}" -> "the block of Actinium"
                else:
                    forms["tail_noun"] = _clean(f"the {{type}} {rest[-1]} which {{head}} {' '.join(body)}")
            elif first.lower() not in BE:
                forms["tail_noun"] = _clean(f"the {{type}} that {{head}} {' '.join(words)}")
    if "ask_tail" not in forms and "{tail}" in statement:
        forms["ask_tail"] = _capitalise(_in_situ(statement, "{tail}")) + "?"
    if "ask_head" not in forms and "{head}" in statement:
        forms["ask_head"] = _capitalise(_in_situ(statement, "{head}")) + "?"
    return forms


def _in_situ(statement: str, asked: str) -> str:
    """The statement with the asked end replaced by "which {type}" (an article before it dropped)."""
    before, after = statement.split(asked, 1)
    words = before.split()
    if words and words[-1].lower() in ARTICLES:
        before = " ".join(words[:-1]) + (" " if len(words) > 1 else "")
    return _clean(before + "which {type}" + after)


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:] if text and not text.startswith("{") else text


def label_statement(label: str) -> str:
    """A statement from a relation label alone: "in block" -> "{head} is in block {tail}", "excludes" ->
    "{head} excludes {tail}", "capital of" -> "{head} is capital of {tail}", a noun -> "{head} has {label} {tail}"."""
    text = _clean(label.replace("_", " "))
    words = text.lower().split()
    if not words:
        return "{head} is related to {tail}"
    if words[0] in BE | MODALS or base_verb(words[0]) is not None or words[0].endswith("ed"):
        return f"{{head}} {text} {{tail}}"
    if words[-1] in PREPOSITIONS or words[0] in PREPOSITIONS:
        return _cut_after_far_end(f"{{head}} is {text} {{tail}}")
    return f"{{head}} has the {text} {{tail}}"


def sentence_statement(sentence: str, head: str, tail: str) -> str | None:
    """``sentence`` with its two ends as {head}/{tail} when it names each exactly once, else None."""
    sentence = _TRAILING.sub("", sentence.strip())
    head_at, tail_at = find_name(sentence, head), find_name(sentence, tail)
    if head_at is None or tail_at is None or len(head_at) != 1 or len(tail_at) != 1:
        return None
    (hs, he), (ts, te) = head_at[0], tail_at[0]
    if hs < te and ts < he:  # overlapping mentions ("Iron" inside "Iron ore")
        return None
    spans = sorted([(hs, he, "{head}"), (ts, te, "{tail}")])
    out, last = [], 0
    for start, end, field in spans:
        out.append(_ARTICLE_BEFORE.sub("", sentence[last:start]))  # "The {head}": the slot takes "a component"
        out.append(field)
        last = end
    out.append(sentence[last:])
    text = _clean("".join(out)).replace("{", "\x00").replace("}", "\x01")
    text = text.replace("\x00head\x01", "{head}").replace("\x00tail\x01", "{tail}")
    if "\x00" in text or "\x01" in text:  # braces in the source text would break formatting
        return None
    return text


def _cut_after_far_end(statement: str) -> str:
    """A description's qualifiers after the second end ("in 1899", "by alpha decay (intensity 100%)") left
    out, and an article or an appositive noun right before it dropped ("is in the subregion {tail}" -> "is
    in {tail}"): the statement keeps only what relates the two ends, and takes any noun phrase there."""
    first = "{head}" if statement.startswith("{head} ") else "{tail}" if statement.startswith("{tail} ") else None
    if first is None:
        return statement
    second = "{tail}" if first == "{head}" else "{head}"
    if second not in statement:
        return statement
    words = drop_article(statement.split(second, 1)[0].split())
    if len(words) > 2 and words[-2].lower() in ARTICLES | PREPOSITIONS - {"to"} and words[-1].lower() not in \
            PREPOSITIONS | BE and base_verb(words[-1]) is None and words[-1].isalpha():  # (after "to" it may be a verb:
        # "asks to code {tail}" is not "asks to {tail}")
        words = drop_article(words[:-1])
    return _clean(" ".join(words) + " " + second)


def shared_statement(label: str, sentences: Iterable[tuple[str, str, str]]) -> str:
    """The statement of a relation label: the pattern most of its description sentences share (each
    (sentence, head, tail)), qualifiers after the tail cut; else the label's own statement."""
    counts: Counter[str] = Counter()
    total = 0
    for sentence, head, tail in sentences:
        total += 1
        for line in _SENTENCE_SPLIT.split(sentence):
            pattern = sentence_statement(line, head, tail)
            if pattern is not None and pattern.startswith(("{head} ", "{tail} ")):
                counts[_cut_after_far_end(pattern)] += 1
                break
    if counts:
        pattern, count = counts.most_common(1)[0]
        if count >= MIN_SHARED_PATTERN * total and _plain(pattern):
            return pattern
    return label_statement(label)


def _plain(pattern: str) -> bool:
    """A shared pattern usable as a statement: short, and its words are not entity-specific (no digits)."""
    words = pattern.replace("{head}", "").replace("{tail}", "").split()
    return 0 < len(words) <= 8 and not any(ch.isdigit() for ch in "".join(words))


_PLURAL_VERBS = {"are": "is", "were": "was", "have": "has"}


def singular_subject(statement: str) -> str:
    """A per-edge statement with its verb in the singular ("{head} are cast in {tail}" -> "{head} is cast in
    {tail}"): its subject slot takes "which material" or "a process" in questions far more often than a plural
    name ("Which material are used ..." was a defect), and a name reads as one thing."""
    for end in ("{head} ", "{tail} "):
        if statement.startswith(end):
            verb, _, rest = statement[len(end):].partition(" ")
            singular = _PLURAL_VERBS.get(verb.lower()) or _third_person(verb)
            if singular is not None:
                return f"{end}{singular} {rest}".rstrip()
    return statement


# past tenses that do not end in -ed ("{head} held the title of …" must not become "helds")
_IRREGULAR_PAST = frozenset("""did had held took made gave led wrote became began left met ran saw set sold spoke stood
told went won found brought built bought thought taught fought sent spent kept felt lost paid said heard meant grew
knew drew threw flew wore rose drove chose broke stole came fell hid got shot lit sat hung struck stuck dug fed fled
read put cut let hit quit shut split spread cast cost hurt bore tore woke sang rang drank swam ate forgot""".split())
def plural_name(name: str) -> bool:
    """Whether a name reads as a plural noun ("POPLAR TREES", "Strip foundations", "The Businessmen"): its last word
    ends in -s but not -ss, -us, -is or a possessive, or is a plural in -men, "people", "children"."""
    words = name.split()
    last = words[-1].lower() if words else ""
    if last in {"people", "children", "men", "women"} or (len(last) > 4 and last.endswith("men")):  # "Businessmen"
        return True
    return len(last) > 3 and last.isalpha() and last.endswith("s") and not last.endswith(("ss", "us", "is"))


_PAST_ENDINGS = tuple(sorted({p for p in _IRREGULAR_PAST if len(p) >= 4} | {"saw"}))  # "oversaw", "undertook"
_NOT_VERBS = {"also", "often", "never", "always", "still", "only", "then", "now", "not", "and", "or", "but", "too",
              "even", "further", "later", "first", "together", "directly", "frequently", "primarily", "mainly"}


def _third_person(word: str) -> str | None:
    """The third-person singular of a plural present verb after a subject ("utilize" -> "utilizes", "do" ->
    "does"); None for a word that is not one (a past or -ing form, an adverb, a modal, a capitalised word)."""
    if not word.isalpha() or not word.islower() or len(word) < 2 or word in _NOT_VERBS or word in BE | MODALS \
            or word in STOPWORDS or word in PREPOSITIONS:  # "{head} of the PDF …": "of" is no verb
        return None
    if word.endswith(("s", "ed", "ing", "en")) or word in _IRREGULAR_PAST or word.endswith(_PAST_ENDINGS):
        return None
    if word.endswith("ly") and word not in {"apply", "reply", "supply", "rely", "comply", "imply", "multiply"}:
        return None  # an adverb ("frequently")
    if word in {"do", "go"}:
        return word + "es"
    if word.endswith(("sh", "ch", "x", "z", "o")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def edge_statement(description: str, head: str, tail: str) -> str | None:
    """A per-edge statement: the first sentence of the edge's description that names both ends once, what it says
    after its second end left out ("{head} acquired {tail}, enhancing its offerings" -> "{head} acquired {tail}"),
    at most MAX_EDGE_SENTENCE_WORDS words; None when no sentence can phrase the edge."""
    for line in _SENTENCE_SPLIT.split(description):
        pattern = sentence_statement(line, head, tail)
        if pattern is None:
            continue
        pattern = _cut_after_far_end(pattern)
        if _POSSESSIVE_SLOT.search(pattern) or _QUOTED_SLOT.search(pattern):  # "{head}'s pride in {tail}", "the
            continue  # '{tail}' function": "an event", "which entity" cannot take the slot's place
        if _reads_end_to_end(pattern):
            return pattern
    return None


def _reads_end_to_end(pattern: str) -> bool:
    """Whether a per-edge statement relates its two ends and nothing else: it starts with one and ends with the
    other ("In 2020 {head} …" or "{head}, now X, made … {tail}" would carry their extra clause into every question
    that nests them), the words between are a plain verb group (no comma, no clause left open, no pronoun that
    points outside it), and at most MAX_EDGE_SENTENCE_WORDS words in all."""
    ends = {"{head}", "{tail}"}
    words = pattern.split()
    if len(words) < 3 or len(words) > MAX_EDGE_SENTENCE_WORDS or {words[0], words[-1]} != ends:
        return False
    middle = [w.lower() for w in words[1:-1]]
    if middle[0] in {"has", "have", "had"} and len(middle) > 1 and _is_past(middle[1]):  # "has played a role in":
        return False  # asked "Which concept does that person have played a role in?"
    return (not any(c in w for w in middle for c in ",;:") and _starts_a_verb_group(middle)
            and _takes_an_object(middle[-1], middle[-2] if len(middle) > 1 else "")
            and not _OUTSIDE_PRONOUNS & set(middle) and any(w not in STOPWORDS for w in middle))


_POSSESSIVE_DETERMINERS = {"his", "her", "its", "their", "our", "my", "your"}
_OBJECT_PARTICLES = {"up", "out", "off", "down", "against", "like", "than", "after", "before", "during", "around",
                     "across", "behind", "beyond", "without", "alongside", "per", "past", "near", "inside", "outside"}


# the verbs a statement may follow with "of" ("consists of"); any other "-s of" is a plural noun ("properties of")
_VERBS_OF = {"consist", "approve", "disapprove", "speak", "think", "dream", "dispose", "partake", "smell", "taste",
             "despair", "tire", "die", "boast", "complain", "hear", "know", "learn", "remind", "accuse", "convince",
             "inform", "warn", "rob", "deprive", "relieve", "strip", "clear", "cure", "notify", "assure"}


def _starts_a_verb_group(middle: list[str]) -> bool:
    """Whether the words after a statement's first end start its verb group: a verb, a form of be or have, a modal
    or an adverb ("also", "frequently"), or a word that may be a verb in its base form ("CUBE TESTS check the
    strength of …") unless a verb follows it (past any adverb), which makes it part of the subject: "POPLAR" found in
    "Poplar tree symbolizes …" leaves "{head} tree symbolizes …", which the singular rule would turn into "Poplar
    trees symbolizes", and "The Workplace environment significantly impacts …" would become "Workplace environments
    significantly impacts …"."""
    first, second = middle[0], middle[1] if len(middle) > 1 else ""
    if first in _OPEN_CLAUSE or first in ARTICLES | PREPOSITIONS or not first.replace("-", "").isalpha():
        return False  # "{head} 2.0 document is processed by": the rest of a longer name ("co-founded" is a verb)
    if second == "of" and first not in BE | AUXILIARIES and not {first, base_verb(first), first[:-1], first[:-2],
                                                                  first[:-3] + "y"} & _VERBS_OF:
        return False  # "The Kind property of the entity in …": a noun, which the question would make "properties"
    if _verb_form(first) or first in {"has", "have", "had"} or first in _NOT_VERBS or first.endswith("ly"):
        return True
    after = next((w for w in middle[1:] if w not in _NOT_VERBS and not w.endswith("ly")), "")
    return not _verb_form(after)  # "{head} environment significantly impacts …": "environment" is the subject's


def _verb_form(word: str) -> bool:
    """A form of be, a modal or auxiliary, a third-person verb or a past tense."""
    return (word in BE or word in MODALS or word in AUXILIARIES or base_verb(word) is not None
            or _is_past(word))


def _is_past(word: str) -> bool:
    return (word.endswith("ed") and len(word) > 3) or word in _IRREGULAR_PAST or word.endswith(_PAST_ENDINGS)


def _takes_an_object(word: str, before: str) -> bool:
    """Whether the word before a statement's second end can take that end as its object: a preposition or particle
    ("is a subcategory of", "looks up"), a form of be, or a verb ("supplies", "hired", "oversaw", "does not include",
    "asks to also code"). Not an adjective or
    a noun ("talks about making strategic {tail}": the question would end "…making strategic?"), nor a word after an
    article or a possessive, which is a noun even where it could be a verb ("mentions the struggles {tail} has faced":
    "A person mentions the struggles that organization"), nor a word that opens a clause ("discusses how {tail}")."""
    if word in _OPEN_CLAUSE or before in ARTICLES | _POSSESSIVE_DETERMINERS:  # "the struggles": a noun, not a verb
        return False
    return (word in PREPOSITIONS or word in _OBJECT_PARTICLES or word in BE or base_verb(word) is not None
            or _is_past(word) or before in AUXILIARIES | MODALS | _NOT_VERBS | {"to"})  # "does not include"


MAX_SHOWN_KEYWORDS = 4  # an unphrased relation's keyword list as shown: the training graphs' lists have <= 4 (p90)


def shown_keywords(keywords: str, limit: int = MAX_SHOWN_KEYWORDS) -> str:
    """An unlabelled relation's keyword list as a tool shows it: at most ``limit`` keywords, those that share the
    most words with the rest of the list (its gist), in their order. LightRAG merges every extraction record's
    keywords into one list: NIST CSF's hub relations carry 36 ("Kind: text,NIST CSWP 29,content context,...", ~600
    characters), where the graphs the agent trained on carry 2-4, and the agent repeated its call on such a node
    (docs/tools.md, "Relations without a label")."""
    parts = list(dict.fromkeys(k.strip() for k in keywords.split(",") if k.strip()))
    if len(parts) <= limit:
        return keywords
    words = [{w for w in re.findall(r"[a-z]+", k.lower()) if w not in STOPWORDS} for k in parts]
    shared = [sum(1 for j, other in enumerate(words) if j != i and mine & other) for i, mine in enumerate(words)]
    kept = sorted(sorted(range(len(parts)), key=lambda i: (-shared[i], len(parts[i]), i))[:limit])
    return ",".join(parts[i] for i in kept)


MAX_EDGE_PHRASE_WORDS = 6  # a relation's phrase in node_info (a verb group, "is cast in"); longer: its keywords


def edge_phrase(description: str, head: str, tail: str) -> tuple[str, bool] | None:
    """What an unlabelled edge (LightRAG's, text extraction's) says of its two ends, as a short phrase: the words
    between the ends in its first description sentence that names both ("ACME supplies GRADE 30 CONCRETE to the
    site" -> "supplies"), and whether that sentence reads from ``tail`` to ``head`` (then the phrase relates them the
    other way round). None when no sentence phrases the edge in at most MAX_EDGE_PHRASE_WORDS words."""
    statement = edge_statement(description, head, tail)
    if statement is None:
        return None
    statement = _cut_after_far_end(statement)
    backward = statement.startswith("{tail} ") and statement.endswith("{head}")
    if not backward and not (statement.startswith("{head} ") and statement.endswith("{tail}")):
        return None
    words = statement[len("{head} "):-len("{tail}")].split()
    if not words or len(words) > MAX_EDGE_PHRASE_WORDS or all(w.lower() in STOPWORDS for w in words):
        return None
    return " ".join(words), backward


def type_noun(entity_type: str, lexicon: PhraseLexicon) -> str:
    """The noun a question uses for an entity of ``entity_type`` ("which country"); "entity" when untyped."""
    raw = entity_type.strip()
    if raw in lexicon.types:
        return lexicon.types[raw]
    noun = _clean(raw.replace("_", " ")).lower()
    noun = GENERIC_TYPE_NOUNS.get(noun, noun)
    return noun if noun and noun not in {"unknown", "none", "other"} else "entity"


def draft_lexicon(labels: dict[str, list[tuple[str, str, str]]], types: Iterable[str],
                  existing: PhraseLexicon | None = None) -> PhraseLexicon:
    """The rules' phrases for every label (``labels``: label -> its edges' (description, head, tail)),
    keeping what ``existing`` already says (a user's edits survive a redraft)."""
    existing = existing or PhraseLexicon()
    relations = dict(existing.relations)
    for label, sentences in sorted(labels.items()):
        if label not in relations:
            relations[label] = derive_forms(shared_statement(label, sentences))
    noun_types = dict(existing.types)
    for entity_type in sorted(set(types)):
        if entity_type and entity_type not in noun_types:
            noun_types[entity_type] = type_noun(entity_type, PhraseLexicon())
    return PhraseLexicon(types=noun_types, relations=relations)


def label_sentences(labels: list[str], descriptions: list[str], names: list[str], src: list[int], dst: list[int],
                    skip: Iterable[str] = ()) -> dict[str, list[tuple[str, str, str]]]:
    """Each relation label's edges as (description, head name, tail name): what the rules read to phrase a label
    (labels in ``skip`` left out)."""
    skipped = set(skip)
    sentences: dict[str, list[tuple[str, str, str]]] = {}
    for rel, label in enumerate(labels):
        if label not in skipped:
            sentences.setdefault(label, []).append((descriptions[rel], names[src[rel]], names[dst[rel]]))
    return sentences


class Phrasebook:
    """The phrases of every relation of one graph: the lexicon's, else the rules' (per label, or per edge
    when labels are not relation names), resolved once per relation."""

    def __init__(self, names: list[str], types: list[str], src: list[int], dst: list[int], labels: list[str],
                 descriptions: list[str], lexicon: PhraseLexicon, *, shared_labels: bool) -> None:
        self.lexicon = lexicon
        self.names, self.types, self.src, self.dst = names, types, src, dst
        self.labels, self.descriptions = labels, descriptions
        self.shared_labels = shared_labels
        self.by_label = dict(lexicon.relations)
        if shared_labels:  # the lexicon's entries, then the rules' for the labels it leaves out
            sentences = label_sentences(labels, descriptions, names, src, dst, skip=self.by_label)
            self.by_label = draft_lexicon(sentences, (), lexicon).relations
        self._edges: dict[int, RelationPhrases | None] = {}

    def relation(self, rel: int) -> RelationPhrases | None:
        """The phrases of relation row ``rel``; None when the edge cannot be phrased (no question uses it)."""
        label = self.labels[rel]
        if label in self.by_label:
            return self.by_label[label]
        if rel not in self._edges:
            head, tail = self.names[self.src[rel]], self.names[self.dst[rel]]
            statement = edge_statement(self.descriptions[rel], head, tail)
            singular = singular_subject(statement) if statement else None
            subject = head if statement and statement.startswith("{head}") else tail
            if statement and plural_name(subject):  # "Poplar trees symbolize(s)": no form reads well in both slots
                singular = None
            self._edges[rel] = derive_forms(singular) if singular else None
        return self._edges[rel]

    def noun(self, node: int) -> str:
        return type_noun(self.types[node], self.lexicon)

    def words(self) -> set[str]:
        """Every word the phrases themselves put into questions (never evidence of an entity)."""
        texts = [type_noun(t, self.lexicon) for t in set(self.types)]
        for phrases in self.by_label.values():
            texts.extend(t for t in phrases.model_dump(exclude_none=True).values())
        return {w for text in texts for w in _FIELDS.sub(" ", text).split()}
