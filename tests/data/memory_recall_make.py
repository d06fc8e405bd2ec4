"""Writes memory_recall.json: 200 notes about a person's life and 100 queries,
each labelled with the note it asks about. The queries come in three kinds, a
third each: paraphrases (other words for the topic, the first name only),
misspellings (letters swapped or dropped in every word that names the note),
and other languages (German, French, Spanish words for the topic). Run it
again to make the same file: the choices are seeded."""
import json
import random
from pathlib import Path

FIRST = ["Anna", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hamid", "Ines", "Jonas",
         "Keiko", "Lars", "Mira", "Nils", "Olga", "Pavel", "Quentin", "Rosa", "Sami", "Tilda"]
LAST = ["Schmidt", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Ferreira", "Kowalski", "Haddad", "Brennan"]

TOPICS = [
    # (note template, paraphrase, German, French, Spanish, values)
    ("{n}'s birthday is on the {v}.", "When was {f} born?", "Wann hat {f} Geburtstag?",
     "Quand est l'anniversaire de {f} ?", "¿Cuándo es el cumpleaños de {f}?",
     ["3rd of March", "12th of May", "21st of June", "9th of October", "30th of November"]),
    ("{n} is allergic to {v}.", "What food must {f} avoid?", "Wogegen ist {f} allergisch?",
     "À quoi {f} est-il allergique ?", "¿A qué es alérgico {f}?",
     ["peanuts", "shellfish", "gluten", "strawberries", "sesame"]),
    ("{n} works as a {v}.", "What is {f}'s job?", "Was arbeitet {f} beruflich?",
     "Quel est le métier de {f} ?", "¿En qué trabaja {f}?",
     ["nurse", "carpenter", "teacher", "pilot", "pharmacist"]),
    ("{n} lives in {v} and prefers the train.", "Which town is {f}'s home?", "In welcher Stadt wohnt {f}?",
     "Dans quelle ville habite {f} ?", "¿En qué ciudad vive {f}?",
     ["Lisbon", "Ghent", "Tampere", "Bologna", "Kraków"]),
    ("{n} plays the {v} on Thursdays.", "Which instrument does {f} practise?", "Welches Instrument spielt {f}?",
     "De quel instrument joue {f} ?", "¿Qué instrumento toca {f}?",
     ["cello", "trumpet", "accordion", "violin", "drums"]),
]


def misspell(word, rng):
    if len(word) < 4:
        return word
    i = rng.randrange(1, len(word) - 2)
    if rng.random() < 0.5:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word[:i] + word[i + 1:]


def main():
    rng = random.Random(24)
    names = [f"{f} {l}" for f in FIRST for l in LAST]
    rng.shuffle(names)
    notes = []
    for k, name in enumerate(names):
        topic = TOPICS[k % len(TOPICS)]
        value = topic[5][(k // len(TOPICS)) % len(topic[5])]
        notes.append({"id": k + 1, "text": topic[0].format(n=name, v=value), "topic": k % len(TOPICS),
                      "name": name})
    queries = []
    for q, note in enumerate(rng.sample(notes, 100)):
        first = note["name"].split()[0]
        topic = TOPICS[note["topic"]]
        kind = ["paraphrase", "misspelling", "language"][q % 3]
        if kind == "paraphrase":
            text = topic[1].format(f=first)
        elif kind == "misspelling":
            text = " ".join(misspell(w, rng) for w in note["text"].rstrip(".").split())
        else:
            text = topic[2 + rng.randrange(3)].format(f=note["name"])
        queries.append({"query": text, "kind": kind, "relevant": [note["id"]]})
    out = {"about": __doc__.split("\n\n")[0], "notes": [{"id": n["id"], "text": n["text"]} for n in notes],
           "queries": queries}
    Path(__file__).with_name("memory_recall.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
