"""Words that carry little meaning on their own, shared by selection and lexical recall."""

from __future__ import annotations

# Function words: never worth matching on.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most much must my myself nor not of off on once only
    or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under
    until us very was we were what when where which while who whom why will with would you
    your yours yourself yourselves that's it's i'm don't can't you're i've i'll didn't
    doesn't isn't""".split()
)

# Words too common in chat to name a topic (used when picking keywords, not in recall:
# "week" or "last" matter to a temporal question).
CHATTER = STOPWORDS | frozenset(
    """yes yeah okay sure really thanks thank like know think going get got one let lot well
    want maybe still something things thing make sounds good great user assistant today
    first last next week weeks time day days tonight morning year years back even never
    always every""".split()
)

# Day and month names: words that date something, never what it is about.
CALENDAR = frozenset("""monday tuesday wednesday thursday friday saturday sunday january
    february march april may june july august september october november december""".split())
