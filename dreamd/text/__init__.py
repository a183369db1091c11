"""English text helpers below every layer that reads or writes memory: dates a turn says
or implies (dates.py), and what someone said told in the third person (speech.py)."""
