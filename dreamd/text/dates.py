"""Relative time made absolute against the date a turn was said.

"I went yesterday" said on Sunday 7 May 2023 happened on Saturday 6 May 2023; a person
asking "when did she go?" months later needs the date, not "yesterday". `resolve` finds
the relative expressions in a text and writes what they mean beside them, so that the
key a turn is indexed by, and what recall shows, carry the absolute date. Pure: no
clock, the turn's own date is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
            "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
            "a couple of": 2, "a few": 3, "couple of": 2, "few": 3}
_NUMBER = r"(\d{1,2}|a couple of|a few|couple of|few|an?|one|two|three|four|five|six|seven|" \
          r"eight|nine|ten|eleven|twelve)"
_DAY = r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"


def long_date(day: date) -> str:
    """Unambiguous in every locale: `Sunday 7 May 2023`."""
    return f"{WEEKDAYS[day.weekday()].capitalize()} {day.day} {MONTHS[day.month - 1]} {day.year}"


def said_line(timestamp: str) -> str:
    """When a conversation's turns were said, as a request shows it before them:
    `Sunday 7 May 2023, 2:32 pm.` (`implied` reads the lines after it as said that day);
    "" for text that is no timestamp."""
    moment = moment_of(timestamp)
    if moment is None:
        return ""
    hour = moment.hour % 12 or 12
    noon = "am" if moment.hour < 12 else "pm"
    return f"{long_date(moment.date())}, {hour}:{moment.minute:02d} {noon}."


def month_name(day: date) -> str:
    return f"{MONTHS[day.month - 1]} {day.year}"


def moment_of(timestamp: str) -> datetime | None:
    """An ISO timestamp as the conversation stored it, read; None for other text."""
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def day_of(timestamp: str) -> date | None:
    """The calendar date of an ISO timestamp as the conversation stored it."""
    moment = moment_of(timestamp)
    return None if moment is None else moment.date()


def shift_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word]


def _weekday_before(day: date, weekday: int) -> date:
    return day - timedelta(days=(day.weekday() - weekday - 1) % 7 + 1)


def _weekday_after(day: date, weekday: int) -> date:
    return day + timedelta(days=(weekday - day.weekday() - 1) % 7 + 1)


def _ago(n: int, unit: str, said: date) -> str:
    unit = unit.rstrip("s")
    if unit == "day":
        return long_date(said - timedelta(days=n))
    if unit == "week":
        return f"the week of {long_date(said - timedelta(weeks=n))}"
    if unit == "month":
        return month_name(shift_months(said, -n))
    return str(said.year - n)


def _ahead(n: int, unit: str, said: date) -> str:
    unit = unit.rstrip("s")
    if unit == "day":
        return long_date(said + timedelta(days=n))
    if unit == "week":
        return f"the week of {long_date(said + timedelta(weeks=n))}"
    if unit == "month":
        return month_name(shift_months(said, n))
    return str(said.year + n)


Meaning = Callable[[re.Match[str], date], str]
# Each rule: a pattern (matched case-insensitively on word boundaries) and what it means
# on the day `said`, from the match. Longer phrases come first.
_RULES: list[tuple[re.Pattern[str], Meaning]] = []


def _rule(pattern: str) -> Callable[[Meaning], Meaning]:
    def register(meaning: Meaning) -> Meaning:
        _RULES.append((re.compile(rf"\b{pattern}\b", re.IGNORECASE), meaning))
        return meaning
    return register


@_rule(r"the day before yesterday")
def _day_before_yesterday(m: re.Match[str], said: date) -> str:
    return long_date(said - timedelta(days=2))


@_rule(r"the day after tomorrow")
def _day_after_tomorrow(m: re.Match[str], said: date) -> str:
    return long_date(said + timedelta(days=2))


@_rule(rf"{_NUMBER} (days?|weeks?|months?|years?) ago")
def _n_ago(m: re.Match[str], said: date) -> str:
    return _ago(_count(m.group(1).lower()), m.group(2).lower(), said)


@_rule(rf"in {_NUMBER} (days?|weeks?|months?|years?)(?: time)?")
def _in_n(m: re.Match[str], said: date) -> str:
    return _ahead(_count(m.group(1).lower()), m.group(2).lower(), said)


@_rule(rf"{_NUMBER} weekends? ago")
def _weekends_ago(m: re.Match[str], said: date) -> str:
    n = _count(m.group(1).lower())
    saturday = _weekday_before(said, 5) - timedelta(weeks=n - 1)
    return f"the weekend of {long_date(saturday)}"


@_rule(r"(yesterday|last night)")
def _yesterday(m: re.Match[str], said: date) -> str:
    return long_date(said - timedelta(days=1))


@_rule(r"(today|tonight|this morning|this afternoon|this evening)")
def _today(m: re.Match[str], said: date) -> str:
    return long_date(said)


@_rule(r"tomorrow")
def _tomorrow(m: re.Match[str], said: date) -> str:
    return long_date(said + timedelta(days=1))


@_rule(r"last weekend")
def _last_weekend(m: re.Match[str], said: date) -> str:
    return f"the weekend of {long_date(_weekday_before(said, 5))}"


@_rule(r"(this|next) weekend")
def _next_weekend(m: re.Match[str], said: date) -> str:
    if m.group(1).lower() == "this" and said.weekday() >= 5:  # said on the weekend itself
        return f"the weekend of {long_date(said - timedelta(days=said.weekday() - 5))}"
    return f"the weekend of {long_date(_weekday_after(said, 5))}"


@_rule(r"(last|next|this) week")
def _week(m: re.Match[str], said: date) -> str:
    which = m.group(1).lower()
    if which == "last":
        return f"the week before {long_date(said)}"
    if which == "next":
        return f"the week after {long_date(said)}"
    return f"the week of {long_date(said)}"


@_rule(r"(last|next|this) month")
def _month(m: re.Match[str], said: date) -> str:
    return month_name(shift_months(said, {"last": -1, "next": 1, "this": 0}[m.group(1).lower()]))


@_rule(r"(last|next|this) year")
def _year(m: re.Match[str], said: date) -> str:
    return str(said.year + {"last": -1, "next": 1, "this": 0}[m.group(1).lower()])


# A weekday as people shorten it ("last Fri"); not "sat" or "sun", which are words too.
_SHORT_DAY = r"(mon|tues?|wed|thu(?:rs?)?|fri)"


# "on Tuesday evenings", "on Friday nights": every such day, a habit (no lookahead needed
# for "on Tuesdays", which the word boundary keeps out).
@_rule(rf"(last|next|this|on|this past|this coming) (?:{_DAY}|{_SHORT_DAY})"
       r"(?!\s+(?:mornings|afternoons|evenings|nights|lunchtimes)\b)")
def _weekday(m: re.Match[str], said: date) -> str:
    which = m.group(1).lower()
    weekday = [d[:3] for d in WEEKDAYS].index((m.group(2) or m.group(3))[:3].lower())
    if which in ("last", "this past"):
        return long_date(_weekday_before(said, weekday))
    if which in ("next", "this coming"):
        return long_date(_weekday_after(said, weekday))
    if weekday == said.weekday():
        return long_date(said)
    # "on Friday"/"this Friday": the last one when the sentence tells of the past ("did 14
    # km on Sunday"), else the coming one, as in a plan.
    if _PAST.search(m.string[:m.start()].rsplit(".", 1)[-1]):
        return long_date(_weekday_before(said, weekday))
    return long_date(_weekday_after(said, weekday))


_PAST = re.compile(r"\b(?:did|was|were|went|had|ran|came|got|saw|met|made|took|\w+ed)\b",
                   re.IGNORECASE)


_FIGURATIVE = re.compile(r"\b(?:like|as if it was|as if it were|as though it was)\s+"
                         r"(?:just\s+|only\s+)?$", re.IGNORECASE)


# Any rule at all, in one scan: most turns hold no relative date, and one look for all the
# rules costs a third of looking for each in turn.
_ANY_RULE = re.compile("|".join(f"(?:{pattern.pattern})" for pattern, _ in _RULES),
                       re.IGNORECASE)


def resolve(text: str, said: date) -> str:
    """`text` with the absolute date written after each relative expression:
    "yesterday" said on 7 May 2023 -> "yesterday (Saturday 6 May 2023)". Overlapping
    phrases resolve once, the longest rule first."""
    if not _ANY_RULE.search(text):
        return text
    spans: list[tuple[int, int, str]] = []
    for pattern, meaning in _RULES:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end, _ in spans):
                continue
            if _FIGURATIVE.search(text[max(0, m.start() - 30):m.start()]):
                continue  # "feels like just yesterday": a figure of speech, not a date
            spans.append((m.start(), m.end(), meaning(m, said)))
    if not spans:
        return text
    out, at = [], 0
    for _, end, absolute in sorted(spans):
        out.append(f"{text[at:end]} ({absolute})")
        at = end
    out.append(text[at:])
    return "".join(out)


@dataclass(frozen=True)
class Period:
    """A stretch of days a text names: a day, a week, a month, a year. `every_year`: a
    month named without its year ("in June"), that month in any year."""

    first: date
    last: date
    every_year: bool = False

    def holds(self, day: date) -> bool:
        if self.every_year:
            return (self.first.month, self.first.day) <= (day.month, day.day) \
                <= (self.last.month, self.last.day)
        return self.first <= day <= self.last

    def meets(self, other: Period) -> bool:
        """Whether the two share a day (a month of any year shares its days with each
        year's)."""
        if self.every_year == other.every_year:
            return self.first <= other.last and other.first <= self.last
        some, dated = (self, other) if self.every_year else (other, self)
        days = min((dated.last - dated.first).days + 1, 366)
        return any(some.holds(dated.first + timedelta(days=n)) for n in range(days))


_MONTH = r"(" + "|".join(m[:3] + r"(?:" + m[3:] + r")?" for m in MONTHS) + r")\.?"
_ORDINAL = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_WEEK = rf"\bthe (week|weekend) (before|of|after) (?:{_DAY} )?{_ORDINAL} {_MONTH},? {_YEAR}\b"
_ABSOLUTE = [(re.compile(p, re.IGNORECASE), kind) for p, kind in (
    (_WEEK, "week"),
    (rf"\b{_ORDINAL} (?:of )?{_MONTH},? {_YEAR}\b", "dmy"),
    (rf"\b{_MONTH} {_ORDINAL},? {_YEAR}\b", "mdy"),
    (rf"\b{_MONTH},? {_YEAR}\b", "my"),
    (rf"\b(?:in|during|of|since|by|until|through|throughout) {_MONTH}\b(?!,? \d)", "m"),
    (rf"(?:\bin |\bduring |\()({_YEAR[1:-1]})\b", "y"),
)]


def _month_of(name: str) -> int:
    return next(n for n, m in enumerate(MONTHS, 1) if m.lower().startswith(name[:3].lower()))


def _month_span(year: int, month: int) -> tuple[date, date]:
    return date(year, month, 1), shift_months(date(year, month, 1), 1) - timedelta(days=1)


def _period(m: re.Match[str], kind: str) -> Period | None:
    g = m.groups()
    try:
        if kind == "week":
            day = date(int(g[5]), _month_of(g[4]), int(g[3]))
            if g[0].lower() == "weekend":
                return Period(day, day + timedelta(days=1))
            if g[1].lower() == "before":
                return Period(day - timedelta(days=7), day - timedelta(days=1))
            if g[1].lower() == "after":
                return Period(day + timedelta(days=1), day + timedelta(days=7))
            return Period(day - timedelta(days=day.weekday()),
                          day + timedelta(days=6 - day.weekday()))
        if kind == "dmy":
            day = date(int(g[2]), _month_of(g[1]), int(g[0]))
            return Period(day, day)
        if kind == "mdy":
            day = date(int(g[2]), _month_of(g[0]), int(g[1]))
            return Period(day, day)
        if kind == "my":
            return Period(*_month_span(int(g[1]), _month_of(g[0])))
        if kind == "m":
            return Period(*_month_span(2000, _month_of(g[0])), every_year=True)
        return Period(date(int(g[0]), 1, 1), date(int(g[0]), 12, 31))
    except ValueError:  # "31 February 2023"
        return None


def periods(text: str) -> list[Period]:
    """The periods a text names with their dates ("on 7 May, 2023", "in June 2023",
    "the week before Monday 3 July 2023", "in June"), in the order they appear; a
    phrase inside a longer one counts once."""
    found: list[tuple[int, int, Period | None]] = []  # None: no such day (31 February)
    for pattern, kind in _ABSOLUTE:
        for m in pattern.finditer(text):
            if not any(m.start() < end and start < m.end() for start, end, _ in found):
                found.append((m.start(), m.end(), _period(m, kind)))
    return [p for _, _, p in sorted(found, key=lambda f: f[0]) if p is not None]


# Words that only say when: what is left of a question without them (and without its
# function words and "tell", "happened" …) is its topic.
DATE_WORDS = frozenset(
    [m.lower() for m in MONTHS] + [m[:3].lower() for m in MONTHS] + list(WEEKDAYS)
    + list(_NUMBERS) + "yesterday today tonight tomorrow morning afternoon evening night "
    "last next this past coming week weekend weekends weeks month months year years day "
    "days ago before after since during st nd rd th".split())


def asked_period(question: str, today: date) -> Period | None:
    """The period a question asks about: the first it names with a date ("in August
    2023", "on 3 June, 2023"), else the first relative one, counted from `today` ("what
    did I say last week?"). A relative phrase beside a date counts from that date, so
    the date is what is asked ("last weekend before April 10, 2023")."""
    found = periods(question) or periods(resolve(question, today))
    return found[0] if found else None


# The day a line was said: a turn dated as dreamd writes it ("[12] Sunday 7 May 2023. Sam:
# …", `long_date`), or a request's line saying when the turns after it were said
# (`said_line`: "Sunday 7 May 2023, 2:32 pm.").
_SAID_ON = re.compile(rf"\b{_DAY} (\d{{1,2}}) ({'|'.join(MONTHS)}) (\d{{4}})"
                      r"(?:, \d{1,2}:\d\d [ap]m)?\.(?:\s|$)", re.IGNORECASE)
_SEASON_OR_MONTH = re.compile(
    r"\b(?:spring|summer|autumn|fall|winter|" + "|".join(MONTHS) + r")\b", re.IGNORECASE)
_WEEKDAY = re.compile(_DAY, re.IGNORECASE)
_LONGEST_SPAN = 14  # days: a longer period grounds its month and year, not every day
# A night is named by the evening it begins: one a dated line tells of ("spent the night
# in hospital", "up all night", "overnight") is the night just gone, which began the day
# before the line was said, or the coming one, which begins that day.
_NIGHT = re.compile(r"\b(?:night|overnight)\b", re.IGNORECASE)
# A count of days or weeks said on its latest day: "day 3" (of quitting coffee, of a
# trip), "week two", "my 3rd day", "the second week": the count began that many days (or
# weeks) less one before the line was said.
_COUNTED = "|".join(w for w in _NUMBERS if w.isalpha() and w not in ("a", "an", "few"))
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
             "ninth", "tenth")
_COUNT = re.compile(
    rf"\b(day|week) (\d{{1,3}}|{_COUNTED})\b|"
    rf"\b(\d{{1,3}})(?:st|nd|rd|th) (day|week)\b|\b({'|'.join(_ORDINALS)}) (day|week)\b",
    re.IGNORECASE)


def _counted(m: re.Match[str]) -> tuple[str, int]:
    """("day" or "week", n) of a count's match."""
    unit = (m.group(1) or m.group(4) or m.group(6)).lower()
    n = m.group(2) or m.group(3) or m.group(5)
    if n.isdigit():
        return unit, int(n)
    if n.lower() in _ORDINALS:
        return unit, _ORDINALS.index(n.lower()) + 1
    return unit, _NUMBERS[n.lower()]


def implied(text: str) -> set[int]:
    """The day, month and year numbers of the dates that the dated lines of `text` imply
    ("yesterday" in a line said on Sunday 17 September 2023: 16, 9, 2023; "three years
    ago": 2020; "last week": each day of that week). A month or season named without its
    year may be the one before or after the day said ("in January", said in September
    2026, is January 2027): those years too; so is the day before a line that tells of a
    night, and the day a count ("day 3", "week two") began. A line without a date of its
    own was said on the last one named above it. Pure: a model told to make dates
    absolute writes these, and they are not made up."""
    out: set[int] = set()
    said: date | None = None
    for line in text.splitlines():
        said_on = _SAID_ON.search(line)
        if said_on is not None:
            try:
                said = date(int(said_on.group(4)), _month_of(said_on.group(3)),
                            int(said_on.group(2)))
            except ValueError:
                said = None
        if said is None:
            continue
        rest = line[said_on.end():] if said_on is not None else line
        if _SEASON_OR_MONTH.search(rest):
            out |= {said.year - 1, said.year + 1}
        for name in _WEEKDAY.findall(rest):  # "on Friday": the one before or the coming
            weekday = WEEKDAYS.index(name.lower())
            for day in (_weekday_before(said, weekday), _weekday_after(said, weekday)):
                out |= {day.day, day.month, day.year}
        if _NIGHT.search(rest):
            night = said - timedelta(days=1)
            out |= {night.day, night.month, night.year}
        out |= _counts_began(rest, said) | _periods_implied(rest, said)
    return out


def _counts_began(rest: str, said: date) -> set[int]:
    """The day a count ("day 3", "week two") began; a week's, each day of its week."""
    out: set[int] = set()
    for m in _COUNT.finditer(rest):
        unit, n = _counted(m)
        if n < 1:
            continue
        began = said - (timedelta(days=n - 1) if unit == "day" else timedelta(weeks=n - 1))
        # a week's count began on some day of that calendar week
        days = 1 if unit == "day" else 7
        first = began if unit == "day" else began - timedelta(days=began.weekday())
        for k in range(days):
            day = first + timedelta(days=k)
            out |= {day.day, day.month, day.year}
    return out


def _periods_implied(rest: str, said: date) -> set[int]:
    """The years and months of the periods `rest` names, and the days of a short one."""
    out: set[int] = set()
    for period in periods(resolve(rest, said)):
        if period.every_year:
            continue
        out |= {period.first.year, period.last.year, period.first.month,
                period.last.month}
        if (period.last - period.first).days <= _LONGEST_SPAN:
            # "last week" is the seven days before, or the calendar week before:
            # a period of days grounds the whole weeks it touches, a day itself.
            first, last = period.first, period.last
            if first < last:
                first -= timedelta(days=first.weekday())
                last += timedelta(days=6 - last.weekday())
            day = first
            while day <= last:
                out.add(day.day)
                day += timedelta(days=1)
    return out
