"""English text helpers below every layer that reads or writes memory, all pure: dates a
turn says or implies (dates.py), what someone said told in the third person (speech.py),
what a turn is indexed by (keys.py), the facts a turn states (facts.py), and facts as
memory shows them: a profile, an era, the narrative, a context line (from_facts.py)."""
