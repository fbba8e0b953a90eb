"""Pure functions of a store: the judgement of a new memory, and the document-frequency
change."""

from __future__ import annotations

import random

import pytest

from dream_memory_actor.models import MemoryFact, utcnow
from dream_memory_actor.storage.dedup import (
    Band,
    Cuts,
    Neighbour,
    df_delta,
    judge,
    judge_pair,
    updated_item,
)
from dream_memory_actor.storage.pairs import _may_align, _read, compare, tokens


def test_df_delta_counts_distinct_terms_of_insert_merge_and_delete() -> None:
    assert df_delta(None, "deploy helm helm") == {"deploy": 1, "helm": 1}
    assert df_delta("deploy helm", "Deploy argo") == {"helm": -1, "argo": 1}
    assert df_delta("deploy helm", None) == {"deploy": -1, "helm": -1}
    assert df_delta("same text", "same text") == {}
    assert df_delta(None, "系统部署") == {"系统": 1, "统部": 1, "部署": 1}


# -- the judgement of a new memory against a stored one (pure) --------------------------


BAND = Band(candidate=0.7, paraphrase=0.75)


@pytest.mark.parametrize(("a", "b", "want"), [
    # one substituted value, negation or name in the value: an update
    ("The staging cluster runs Kubernetes 1.27.", "The staging cluster runs Kubernetes 1.29.",
     "update"),
    ("The user lives in Lisbon.", "The user lives in Porto.", "update"),
    ("The user enjoys running.", "The user no longer enjoys running.", "update"),
    ("The user likes bullet points.", "The user dislikes bullet points.", "update"),
    ("网关的接口超时时间设为 30 秒。", "网关的接口超时时间设为 60 秒。", "update"),
    ("用户家里养了两只猫。", "用户家里养了三只猫。", "update"),
    ("用户下周二下午三点去医院复查。", "用户下周四下午三点去医院复查。", "update"),
    # a change in the subject: another fact
    ("The staging web server listens on port 8080.",
     "The staging admin server listens on port 8080.", "distinct"),
    ("测试环境的 Nginx 监听 8080 端口。", "预发环境的 Nginx 监听 8080 端口。", "distinct"),
    ("The user is reading Dune.", "The user's book club is reading Dune.", "distinct"),
    # a common word in the value: the rules cannot tell
    ("The user has a standing desk at the office.", "The user has a standing desk at home.",
     "unsure"),
    # the same content: function words, punctuation, short forms, number words, moves
    ("went live on Kubernetes", "went live on K8s", "duplicate"),
    ("Mia is seven years old.", "Mia is 7 years old.", "duplicate"),
    ("Backups run every night at 2 am.", "Every night at 2 am the backups run.", "duplicate"),
    ("订单服务周四晚上上线。", "订单服务礼拜四晚上上线。", "duplicate"),
    # 非常 ("very") and 没问题 ("fine") hold a negation character and negate nothing:
    # no reversal, so no update of one by the other
    ("用户非常喜欢吃辣。", "用户喜欢吃辣。", "distinct"),
    ("测试没问题再发布。", "测试通过再发布。", "distinct"),
])
def test_pairs_are_judged_by_what_differs(a: str, b: str, want: str) -> None:
    assert judge_pair(a, b, 0.95, BAND).outcome == want


def test_reworded_texts_are_judged_by_similarity_and_numbers() -> None:
    a = "Our Kubernetes cluster runs in the Frankfurt region."
    b = "The K8s cluster is hosted in Frankfurt."
    assert judge_pair(a, b, 0.9, BAND).outcome == "duplicate"
    # below the rewording cut the similarity alone cannot tell: stored beside it, and a
    # judge model, when one is configured, decides
    assert judge_pair(a, b, 0.72, BAND).outcome == "unsure"
    # ... but two turns worded apart are never merged on similarity: nothing to ask
    assert judge_pair("Jon: " + a, "Jon: " + b, 0.72, BAND).outcome == "distinct"
    # numbers that disagree are never a rewording, however similar
    assert judge_pair("Rent is 1,800 euros a month.", "Each month the flat costs 2100 euros.",
                      0.99, BAND).outcome == "unsure"
    assert judge_pair("Rent is 1,800 euros a month.", "Each month the flat costs €1800.",
                      0.9, BAND).outcome == "duplicate"


def test_judge_prefers_a_duplicate_then_an_update_among_the_nearest() -> None:
    cuts = Cuts(BAND, BAND, nearest=3)
    near = [Neighbour("web", "The staging web server listens on port 8080.", 0.97),
            Neighbour("admin", "The staging admin server listens on port 8081.", 0.96),
            Neighbour("same", "the staging admin server  listens on port 8080.", 0.5)]
    new = "The staging admin server listens on port 8080."
    j = judge(new, near, cuts)
    assert j is not None and (j.outcome, j.memory_id) == ("duplicate", "same")  # same text
    j = judge(new, near[:2], cuts)
    assert j is not None and (j.outcome, j.memory_id) == ("update", "admin")
    j = judge(new, near[:1], cuts)
    assert j is not None and (j.outcome, j.memory_id) == ("distinct", "web")
    # below the candidate cut nothing is judged; only the first `nearest` are
    assert judge(new, [Neighbour("x", "The staging web server.", 0.6)], cuts) is None
    assert judge(new, near[:2], Cuts(BAND, BAND, nearest=1)).outcome == "distinct"  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ["", "!!!", "?" * 100, "a" * 32 * 1024,
                                  "中文 and English 混合 text", "\u200b", "1.2.3.4.5",
                                  "二〇二六年一百二十万"])
def test_comparison_takes_any_text(text: str) -> None:
    tokens(text)
    c = compare(text, text + " x")
    assert 0.0 <= c.shared <= 1.0
    assert judge_pair(text or "x", text or "x", None, BAND).outcome == "duplicate"


def _facts(*texts: str) -> tuple[MemoryFact, ...]:
    return tuple(MemoryFact(id=f"f{i}", content=t, source="user", created_at=utcnow())
                 for i, t in enumerate(texts))


@pytest.mark.parametrize(("stored", "new", "replaced"), [
    (("The user is a Java developer", "The user lives in Berlin"),
     "The user is a Go developer", "f0"),
    (("用户是Java开发者",), "用户是Go开发者", "f0"),
    (("Deploys happen on Friday",), "Deploys happen on Monday", "f0"),
    (("Never push to main directly",), "Push to main directly", "f0"),
    (("The user lives in Berlin",), "The user works in Berlin", None),  # a word: beside
    (("Server 0 is in Oslo",), "Server 1 is in Oslo", None),  # another server
    (("The user is a Java developer",), "The user is a Java developer", None),  # itself
    (("Answer in English", "Answer in French"), "Answer in German", None),  # a tie
    (("The user is a Java developer",), "Billing runs on PostgreSQL 16", None),
])
def test_updated_item(stored: tuple[str, ...], new: str, replaced: str | None) -> None:
    found = updated_item(_facts(*stored), new)
    assert (None if found is None else found[0].id) == replaced


@pytest.mark.parametrize(("stored", "new", "outcome"), [
    # Worded apart and very similar, but each names another show: not one memory.
    ("Mia saw the musical 'Cats' with her aunt on Sunday",
     "On Sunday Mia and her aunt went to see 'Hamilton'", "unsure"),
    # Only one of them says not.
    ("The user drinks coffee in the morning", "In the morning the user never has coffee",
     "unsure"),
    # A short form is the same name: nothing in conflict, a rewording.
    ("Our API is written in TypeScript and runs on Node",
     "The API code uses TS on top of Node", "duplicate"),
    # Reworded, and what it ends on replaced by another word.
    ("孩子说他喜欢大象", "孩子说自己最喜欢企鹅", "unsure"),
    # One event told instead of another is not a new value of it.
    ("Sam spent the evening playing 'Mario Kart' with Leo",
     "Sam spent the evening at the cinema with Leo", "unsure"),
    ("The team moved from New York to San Francisco",
     "The team moved from New York to Boston", "update"),
])
def test_look_alike_events_are_not_merged(stored: str, new: str, outcome: str) -> None:
    assert judge_pair(stored, new, 0.97, Band(0.70, 0.75)).outcome == outcome


def test_cuts_off_judge_nothing_not_even_the_same_text() -> None:
    same = Neighbour("m1", "The user deploys on Fridays", 1.0)
    assert judge("The user deploys on Fridays", [same], Cuts.uniform(0.9)) is not None
    assert judge("The user deploys on Fridays", [same], Cuts.off()) is None


@pytest.mark.parametrize(("a", "b", "want"), [
    # a time of day in words, on a 12-hour or a 24-hour clock, is one time
    ("Production deploys happen every Thursday at 3 pm.",
     "Every Thursday at 15:00 the team deploys to production.", "duplicate"),
    ("The standup is every weekday at 9:30.",
     "Every weekday at half past nine there is a standup.", "duplicate"),
    ("The user commutes on the 7:45 a.m. train.",
     "The user's train to work leaves at a quarter to eight.", "duplicate"),
    ("今晚八点发版。", "版本发布时间定在今天晚上20:00。", "duplicate"),
    ("孩子下午三点一刻要从学校接回来。", "三点十五分要去学校接孩子。", "duplicate"),
    # ... and two times stay two values
    ("Deploys happen at 3 pm.", "Deploys happen at 4 pm.", "update"),
    ("Every Thursday at 3 pm the team deploys.", "The team deploys on Thursdays at 16:00.",
     "unsure"),
    ("每天夜里两点自动备份。", "备份在每天下午两点运行。", "unsure"),
    # an acronym and its words are one name
    ("The CI pipeline runs on GitHub Actions.",
     "The continuous integration pipeline runs on GitHub Actions.", "duplicate"),
    ("The SRE team owns the alerts.", "The site team owns the alerts.", "distinct"),
    # "on Fridays" is "every Friday"
    ("The user deploys on Fridays.", "The user deploys every Friday.", "duplicate"),
])
def test_one_thing_in_other_words_is_not_a_change(a: str, b: str, want: str) -> None:
    assert judge_pair(a, b, 0.95, BAND).outcome == want


def test_times_of_day_are_read_on_a_24_hour_clock() -> None:
    assert [t.norm for t in tokens("at a quarter to eight")] == ["at", "7:45"]
    assert [t.norm for t in tokens("9:30 a.m. or 4 pm")] == ["9:30", "or", "16"]
    assert [t.norm for t in tokens("晚上八点半")] == ["晚", "上", "20:30"]
    # 夜里两点 is at night (夜里 compared as 晚上); 三点 alone says neither, and 一点 may
    # be "a little"
    assert [t.norm for t in tokens("夜里两点")] == ["晚", "上", "2"]
    assert [t.norm for t in tokens("快一点")] == ["快", "1", "点"]


def test_words_that_hold_a_negation_character_and_negate_nothing() -> None:
    # 差不多 is "about": no "not" against 大约
    assert not compare("账单大约一万二千美元。", "账单差不多一万两千美元。").negation_differs
    assert compare("账单大约一万二千美元。", "账单不到一万二千美元。").negation_differs


def test_a_time_made_more_precise_is_another_value() -> None:
    j = judge_pair("The standup is at 9.", "The standup is at 9:30.", 0.95, BAND)
    assert j.outcome == "update"


# -- turns of a conversation, and names --------------------------------------------------


def test_a_shared_speaker_label_is_no_evidence_of_an_update() -> None:
    # The label says who speaks, not what: two short turns of one speaker share nothing.
    a, b = "Priya: Thanks!", "Priya: Cheers!"
    c = compare(a, b)
    assert c.labelled and c.shared == 0.0
    assert judge_pair(a, b, 0.97, BAND).outcome == "distinct"


def test_turns_worded_apart_are_not_merged_on_similarity() -> None:
    # Their cosine holds the speaker's label: near whatever the turns say.
    a = "Omar: The hike up the ridge was exhausting but worth it."
    b = "Omar: Climbing that ridge wore me out, but the view paid off."
    assert judge_pair(a, b, 0.97, BAND).outcome == "distinct"
    # ... while the same turn merges, and a turn's value is still updated by a newer one
    assert judge_pair(a, a.upper(), 0.97, BAND).outcome == "duplicate"
    assert judge_pair("Omar: My flight leaves at 9.", "Omar: My flight leaves at 10.",
                      0.97, BAND).outcome == "update"
    # two speakers saying one thing said two things
    assert judge_pair("Maria: Bye!", "John: Bye!", 0.97, BAND).outcome == "distinct"


def test_a_capital_that_starts_a_sentence_is_no_name() -> None:
    j = judge_pair("The release went out on time. Great", "The release went out on time. Perfect",
                   0.97, BAND)
    assert j.outcome == "unsure"
    j = judge_pair("Omar: Good night, Lea! Sleep well!", "Omar: Good night, Lea! Safe travels!",
                   0.97, BAND)
    assert j.outcome == "unsure"
    assert [t.initial for t in tokens("Ann: Hi Bo. Ok")] == [False, False, True, False, False,
                                                             True]


def test_a_name_added_or_dropped_is_no_other_value() -> None:
    assert judge_pair("The user went hiking with Tom.", "The user went hiking.", 0.97,
                      BAND).outcome == "unsure"
    assert judge_pair("The user went hiking with Tom.", "The user went hiking with Ana.", 0.97,
                      BAND).outcome == "update"


@pytest.mark.parametrize(("a", "b", "want"), [
    ("用户的闺女在学游泳。", "用户的女儿在学游泳。", "duplicate"),
    ("季度复盘会定在十号。", "季度复盘会定在十日。", "duplicate"),
    ("家长会在礼拜天下午。", "家长会在周日下午。", "duplicate"),
    ("支付服务今晚部署。", "支付服务今晚上线。", "duplicate"),
    ("用户爱喝拿铁。", "用户喜欢喝拿铁。", "duplicate"),
    ("用户打算明年换工作。", "用户计划明年换工作。", "duplicate"),
    ("用户目前住在杭州。", "用户现在住在杭州。", "duplicate"),
    ("用户爱喝拿铁。", "用户不爱喝拿铁。", "update"),
    # 爱 alone is no "likes to": 爱人 is a spouse
    ("用户的爱人是医生。", "用户的喜欢人是医生。", "distinct"),
    # Sunday is a weekday as the others are: another one is another value
    ("用户每周六去健身房。", "用户每礼拜天去健身房。", "update"),
    ("用户每周日去健身房。", "用户每星期天去健身房。", "duplicate"),
    # the day is still a value, and 号 that is no day of the month stays a word
    ("季度复盘会定在十号。", "季度复盘会定在十二号。", "update"),
    ("他的工号是多少没人知道。", "他的工日是多少没人知道。", "distinct"),
])
def test_everyday_chinese_wordings_of_one_thing(a: str, b: str, want: str) -> None:
    assert judge_pair(a, b, 0.95, BAND).outcome == want


def test_free_of_says_without() -> None:
    assert [t.norm for t in tokens("kept free of meetings, a sugar-free diet")] == [
        "kept", "without", "meetings", ",", "a", "without", "sugar", "diet"]
    # both say "no meetings on Friday afternoons": nothing in conflict
    assert judge_pair("Never book calls for the user on Monday mornings.",
                      "The user wants Monday mornings kept free of calls.", 0.95,
                      BAND).outcome == "duplicate"
    # a preference reversed is still an update
    assert judge_pair("The user drinks sugar-free cola.", "The user drinks cola with sugar.",
                      0.95, BAND).outcome == "update"
    assert judge_pair("The user takes coffee with milk.", "The user takes coffee milk-free.",
                      0.95, BAND).outcome == "update"


@pytest.mark.parametrize(("a", "b", "want"), [
    ("Deploys happen on Fridays.", "Deployments happen every Friday.", "duplicate"),
    ("The nightly job was moved to 3 am.", "The nightly job is moving to 3 am.", "duplicate"),
    ("The release notes are written by Ana.", "The released notes are written by Ana.",
     "duplicate"),
    # an agent noun is another word: the coder is no code
    ("The codes are reviewed by Ana.", "The coder is reviewed by Ana.", "distinct"),
])
def test_two_forms_of_one_word_are_no_change(a: str, b: str, want: str) -> None:
    assert judge_pair(a, b, 0.95, BAND).outcome == want


def test_the_readings_kept_are_bounded_by_characters_not_by_texts() -> None:
    """A batch compares a stored text again each time it comes back as a neighbour: the
    readings of the texts read last are kept, as many as fit ``_KEPT_CHARS`` characters
    (thousands of conversation turns); a text longer than ``_KEPT_LENGTH`` is not kept."""
    from dream_memory_actor.storage import pairs

    texts = [f"Turn {i}: Caroline went to the support group on day {i} and felt at home."
             for i in range(5000)]
    for t in texts:
        pairs.tokens(t)
    assert pairs._readings_chars <= pairs._KEPT_CHARS
    assert pairs._readings_chars == sum(len(t) for t in pairs._readings)
    assert len(pairs._readings) >= 2000  # a whole conversation's turns, and more
    assert texts[-1] in pairs._readings and texts[0] not in pairs._readings
    assert pairs.tokens(texts[-1]) is pairs._readings[texts[-1]].tokens
    long = "word " * 300
    pairs.tokens(long)
    assert long not in pairs._readings


def test_a_word_is_made_a_token_once_and_its_place_never_changes_the_kept_one() -> None:
    """The Latin tokens are kept (``_latin_tokens``, at most ``_KEPT_TOKENS``) and shared by
    the texts that have the word; a text where the word is a speaker's label or starts
    a sentence gets a token of its own, and the kept one stays as it was made."""
    from dream_memory_actor.storage import pairs

    pairs._latin_tokens.clear()
    in_label = pairs._reading("Jon: the deploy is done.").tokens[0]
    named = pairs._reading("Ask Jon about the deploy.").tokens[1]
    assert (in_label.text, in_label.label) == ("Jon", True)
    assert (named.text, named.label, named.initial, named.name) == ("Jon", False, False, True)
    assert named is pairs._latin_tokens["Jon", False]
    assert pairs._reading("The deploy is done.").tokens[1] is pairs._latin_tokens["deploy", False]
    for i in range(pairs._KEPT_TOKENS + 10):
        pairs._latin_token(f"w{i}", False)
    assert len(pairs._latin_tokens) <= pairs._KEPT_TOKENS


# -- what a comparison tells without aligning the texts ----------------------------------


#: Words with the forms ``_equivalent`` lets stand for each other (short forms, forms of
#: one word, an acronym and its words), numbers, names, Chinese, and a speaker's label.
WORDS = """
    the deploy deploys deployment deployments k8s kubernetes ts typescript go golang
    CI continuous integration staging cluster runs on friday monday 9 10:30 Porto
    Lisbon user lives in not no longer likes 部署 系统 周五 三点 Jon: Ana: hiking
    the ridge was worth it
    """.split()  # noqa: SIM905 - a word list reads better as text


def test_may_align_never_says_no_to_texts_that_share_half() -> None:
    """``_may_align`` is a bound: wherever the alignment shares half of the content,
    it says so, over texts made of equivalent forms, labels and values; and it tells
    most unrelated pairs apart without aligning them."""
    # each needs the form it names to reach half
    for ta, tb in (("deploys", "deployments"), ("k8s", "kubernetes"), ("TS", "TypeScript"),
                   ("SRE team", "site reliability engineering team")):
        assert compare(ta, tb).shared >= 0.5 and compare(tb, ta).shared >= 0.5
        assert _may_align(_read(ta), _read(tb)) and _may_align(_read(tb), _read(ta))
    rng = random.Random(11)
    told_apart = 0
    for _ in range(3000):
        a = rng.sample(WORDS, rng.randrange(1, 9))
        b = [w if rng.random() < 0.6 else rng.choice(WORDS) for w in a]
        if rng.random() < 0.3:
            b = rng.sample(WORDS, rng.randrange(1, 9))
        ta, tb = " ".join(a), " ".join(b)
        c = compare(ta, tb)
        if c.shared >= 0.5:
            assert _may_align(_read(ta), _read(tb)), (ta, tb)
        if not _may_align(_read(ta), _read(tb)):
            told_apart += 1
            assert not compare(ta, tb).aligned
    assert told_apart > 300


def test_a_value_change_is_told_without_aligning_when_a_text_names_no_value() -> None:
    c = compare("The standup is on Friday.", "The standup is on Monday.")
    assert c.value_change is not None and c.value_change.kind == "value"
    assert compare("The standup is on Friday.", "The standup moved.").value_change is None
    # told apart without an alignment: nothing of it is made
    c = compare("Jon: The hike was long.", "Ana: Deploys run on Kubernetes.")
    assert not c.aligned and c.value_change is None and c._alignment is None
    assert c.shared == 0.0 and c._alignment is not None
