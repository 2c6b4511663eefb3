"""Word banks for the synthetic generators: people, places, activities, objects, dates, relative times.

Original lists written for this project (no data set is copied). Each generator draws from them with its
own seeded `random.Random`, so output depends only on (generator, seed, shard).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

FEMALE = """Maya Priya Sofia Elena Aisha Hannah Chloe Nadia Grace Leila Ines Mei Yuki Amara Zoe Clara Rosa
Fatima Nora Lucia Ingrid Keiko Olga Tara Beatriz Hana Joanna Marta Esther Ava Lena Naomi Ruth Selin Irene
Dalia Freya Julia Kira Lila Mina Paula Rania Sana Talia Vera Wanda Yara Zainab Anika Bianca Carmen Daria
Emma Farah Gemma Helga Ivy Jade""".split()
MALE = """Liam Omar Mateo Kenji Lucas Daniel Arjun Tomas Ravi Felix Hugo Jonas Malik Nikolai Pavel Samir Theo
Victor Yusuf Andre Bruno Caleb Dmitri Elias Farid Gabriel Hassan Ivan Jakob Karim Leon Marco Nils Oscar
Pedro Quentin Rafael Stefan Tariq Ulrich Vikram Wesley Xavier Yosef Zane Adrian Boris Cyrus Dario Emil
Finn Gustavo Henrik Idris Joel Kofi""".split()
SURNAMES = """Chen Patel Garcia Okafor Novak Silva Kowalski Haddad Tanaka Moreau Lindqvist Romero Mensah
Fischer Ivanova Nakamura Rossi Osei Dubois Kaur Larsen Mendes Costa Yilmaz Berg Horvath Nguyen Adeyemi
Sato Petrov Alvarez Keller Jansen Murphy Sharma Bauer Ortiz Abara Lindgren Vargas""".split()

# Full first name -> nickname (unambiguous pairs).
NICKNAMES: dict[str, str] = {
    "Elizabeth": "Liz", "Robert": "Bob", "William": "Bill", "Katherine": "Kate", "Michael": "Mike",
    "Jennifer": "Jen", "Christopher": "Chris", "Margaret": "Maggie", "Richard": "Rick", "Daniel": "Dan",
    "Samantha": "Sam", "Benjamin": "Ben", "Victoria": "Tori", "Nicholas": "Nick", "Rebecca": "Becca",
    "Theodore": "Teddy", "Patricia": "Patty", "Anthony": "Tony", "Alexandra": "Sasha", "Josephine": "Josie",
    "Frederick": "Fred", "Gabriella": "Gabi", "Timothy": "Tim", "Susannah": "Susie", "Matthew": "Matt",
}
NICK_GENDER: dict[str, str] = {n: ("f" if n in {
    "Elizabeth", "Katherine", "Jennifer", "Margaret", "Samantha", "Victoria", "Rebecca", "Patricia", "Alexandra",
    "Josephine", "Gabriella", "Susannah"} else "m") for n in NICKNAMES}

CITIES = """Lisbon Denver Osaka Nairobi Krakow Montreal Austin Porto Seville Bergen Hanoi Tbilisi Cusco
Valencia Leeds Adelaide Quito Halifax Lyon Utrecht Tallinn Boise Savannah Accra Cork Bologna Graz Split
Malaga Tucson Ghent Aarhus Bilbao Kyoto Perth Galway Tampere Salzburg Asheville Oaxaca""".split()
# Place aliases that co-refer (short form, long form).
PLACE_ALIASES: tuple[tuple[str, str], ...] = (
    ("NYC", "New York City"), ("LA", "Los Angeles"), ("SF", "San Francisco"), ("Philly", "Philadelphia"),
    ("the Big Apple", "New York"), ("Vegas", "Las Vegas"), ("DC", "Washington, D.C."), ("Rio", "Rio de Janeiro"),
    ("the Windy City", "Chicago"), ("Nola", "New Orleans"), ("the Met", "the Metropolitan Museum"),
    ("MoMA", "the Museum of Modern Art"), ("the Tube", "the London Underground"),
)
VENUES = """the farmers market|the climbing gym|the public library|the community garden|the jazz club|the
pottery studio|the bakery on Elm Street|the botanical garden|the science museum|the county fair|the dog park|
the night market|the old cinema|the art gallery downtown|the lake house|the harbour|the rooftop bar|the
swimming pool|the yoga studio|the bookshop café""".replace("\n", " ").split("|")

JOBS = """nurse|software engineer|architect|high school teacher|pastry chef|data analyst|electrician|lawyer|
veterinarian|graphic designer|accountant|physiotherapist|journalist|pharmacist|civil engineer|photographer|
social worker|dentist|product manager|marine biologist""".replace("\n", "").split("|")
COMPANIES = """Northwind|Bluepeak|Harbor Labs|Greenfield Health|Atlas Freight|Cobalt Studio|Riverstone Bank|
Lumen Robotics|Orchard Foods|Beacon Media|Summit Clinic|Pinecrest School|Ironbridge Construction|Helios Energy|
Quill Publishing""".replace("\n", "").split("|")
PROJECTS = """Atlas Orion Juniper Falcon Meridian Nimbus Cascade Horizon Aurora Keystone Tundra Sapphire
Beacon Zephyr Granite""".split()
TOOLS = """PostgreSQL|Kubernetes|a weekly stand-up|a shared spreadsheet|React|a Kanban board|Python|
nightly backups|a code freeze|pair programming|a vendor contract|an external audit""".replace("\n", "").split("|")

# (base form, past tense, gerund, object noun for "the ... ").
ACTIVITIES: tuple[tuple[str, str, str], ...] = (
    ("go hiking", "went hiking", "hiking"), ("paint a mural", "painted a mural", "painting a mural"),
    ("run a half marathon", "ran a half marathon", "running a half marathon"),
    ("bake sourdough", "baked sourdough", "baking sourdough"), ("go camping", "went camping", "camping"),
    ("take a pottery class", "took a pottery class", "taking a pottery class"),
    ("volunteer at the shelter", "volunteered at the shelter", "volunteering at the shelter"),
    ("play in a chess tournament", "played in a chess tournament", "playing in a chess tournament"),
    ("go kayaking", "went kayaking", "kayaking"), ("visit the aquarium", "visited the aquarium", "visiting the aquarium"),
    ("learn to surf", "learned to surf", "learning to surf"), ("plant tomatoes", "planted tomatoes", "planting tomatoes"),
    ("build a bookshelf", "built a bookshelf", "building a bookshelf"), ("sing in a choir concert", "sang in a choir concert", "singing in a choir concert"),
    ("go birdwatching", "went birdwatching", "birdwatching"), ("cook a Thai dinner", "cooked a Thai dinner", "cooking a Thai dinner"),
    ("attend a photography workshop", "attended a photography workshop", "attending a photography workshop"),
    ("go to a jazz concert", "went to a jazz concert", "going to a jazz concert"),
    ("fix an old bike", "fixed an old bike", "fixing an old bike"), ("knit a scarf", "knitted a scarf", "knitting a scarf"),
    ("go ice skating", "went ice skating", "ice skating"), ("adopt a rescue dog", "adopted a rescue dog", "adopting a rescue dog"),
    ("give a talk at a meetup", "gave a talk at a meetup", "giving a talk at a meetup"),
    ("go to a wine tasting", "went to a wine tasting", "going to a wine tasting"),
)
HOBBIES = """pottery|chess|rock climbing|birdwatching|knitting|salsa dancing|gardening|photography|baking|
woodworking|swimming|playing the violin|cycling|board games|calligraphy|yoga|fishing|sketching""".replace("\n", "").split("|")
FOODS = """green tea|dark chocolate|spicy ramen|olives|blue cheese|mango sorbet|black coffee|sushi|lentil soup|
pistachio ice cream|sourdough bread|kimchi|roasted beets|lemon tart|falafel|oat milk|mushroom risotto|
grapefruit""".replace("\n", "").split("|")
GENRES = """jazz|science fiction|heavy metal|folk music|mystery novels|documentaries|horror films|classical
music|romantic comedies|poetry|podcasts about history|reggae""".replace("\n", " ").split("|")
PETS = """Biscuit Luna Pepper Mochi Rufus Olive Ziggy Noodle Juniper Pickles Bruno Clover""".split()
RELATIONS = """sister|brother|cousin|neighbour|coworker|manager|roommate|aunt|uncle|best friend|
mentor|landlord""".replace("\n", "").split("|")
OBJECTS = """a vintage camera|a red bicycle|a wooden desk|a blue tent|a cast-iron pan|an old guitar|a telescope|
a sewing machine|a leather journal|a kayak|a record player|a standing lamp""".replace("\n", "").split("|")
EVENTS = """the conference|the wedding|the product launch|the marathon|the school play|the housewarming party|
the family reunion|the job interview|the art fair|the charity gala|the camping trip|the team offsite""".replace("\n", "").split("|")
MONTHS = """January February March April May June July August September October November December""".split()
WEEKDAYS = """Monday Tuesday Wednesday Thursday Friday Saturday Sunday""".split()
GREETINGS = (
    "Hey {n}! Good to see you!", "Hi {n}, how have you been?", "Thanks so much, {n}!", "Haha, that's so true.",
    "Wow, that sounds amazing!", "Talk soon, {n}. Take care!", "Oh nice, tell me more!", "Sure, no problem.",
    "Good morning, {n}!", "That's great to hear, {n}.", "Ha! I love that.", "Okay, see you later!",
    "Aw, thanks {n}, that means a lot.", "Totally agree with you there.", "Sounds like a plan!",
    "Hope your week is going well, {n}.", "Bye for now, {n}!", "Hmm, I'm not sure, {n}.",
)


@dataclass(frozen=True)
class Person:
    first: str
    last: str
    gender: str  # "f" or "m": picks the pronouns

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"

    @property
    def he(self) -> str:
        return "she" if self.gender == "f" else "he"

    @property
    def him(self) -> str:
        return "her" if self.gender == "f" else "him"

    @property
    def his(self) -> str:
        return "her" if self.gender == "f" else "his"


def person(rng: random.Random, *, exclude: set[str] | None = None, gender: str | None = None) -> Person:
    """A random person whose first name is not in `exclude`."""
    g = gender or rng.choice("fm")
    pool = FEMALE if g == "f" else MALE
    names = [n for n in pool if not exclude or n not in exclude]
    return Person(rng.choice(names), rng.choice(SURNAMES), g)


def people(rng: random.Random, k: int) -> list[Person]:
    """k people with distinct first and last names."""
    out: list[Person] = []
    while len(out) < k:
        p = person(rng, exclude={q.first for q in out})
        if all(p.last != q.last for q in out):
            out.append(p)
    return out


def date_phrase(rng: random.Random) -> str:
    """A calendar day without a year, like `3 May`."""
    return f"{rng.randint(1, 28)} {rng.choice(MONTHS)}"


def pick(rng: random.Random, items: tuple[str, ...] | list[str], k: int) -> list[str]:
    return rng.sample(list(items), k)
