"""A seeded product catalogue in the shape of WebShop's scraped Amazon products, and shopping instructions over it.

A product is a dict with the fields the original's engine and reward read (``web_agent_site/engine/engine.py``
after ``load_products``): ``asin``, ``Title``, ``Description``, ``BulletPoints``, ``Attributes``, ``options``
(option name -> values), ``pricing`` / ``Price`` / ``price``, ``Rating``, ``Reviews``, ``category``, ``query``,
and ``product_category`` (``a › b › c``).

An instruction (a "goal", as the original calls it) names a target product's type, some of its attributes, one value
of each of its option groups and a price bound, in one of several phrasings; its fields are those of the original's
``get_human_goals``: ``asin``, ``category``, ``query``, ``name``, ``product_category``, ``instruction_text``,
``attributes``, ``price_upper``, ``goal_options`` (option name -> value), plus ``search`` (the expert's query: the
instruction's product phrase).

Everything is a pure function of its seed (``random.Random``), so the grader, the rollout hosts and the expert build
the same catalogue independently; nothing is stored.
"""
from __future__ import annotations

import random
import string

# The original's price bounds: the next steps of 10 dollars above the product's price (engine/goal.py).
PRICE_RANGE = [10.0 * i for i in range(1, 100)]

# Product types: category path, search query, attribute pool, option groups (name -> values), price range (dollars).
# Modelled on WebShop's five categories (beauty, electronics, fashion, grocery, furniture/home).
TYPES: dict[str, dict] = {
    # beauty
    "shampoo": dict(category="beauty", path="Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
                    attributes=["sulfate free", "paraben free", "natural ingredients", "dry hair", "hair growth",
                                "cruelty free", "long lasting"],
                    options={"size": ["8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz"],
                             "scent": ["lavender", "coconut", "tea tree", "citrus", "unscented"]}, price=(6, 38)),
    "hair extension": dict(category="beauty", path="Beauty & Personal Care › Hair Care › Hair Extensions & Wigs",
                           attributes=["natural looking", "clip in", "heat resistant", "easy apply", "high quality",
                                       "synthetic hair"],
                           options={"color": ["black", "dark brown", "blonde", "auburn", "grey"],
                                    "size": ["14 inch", "18 inch", "22 inch"]}, price=(12, 70)),
    "lipstick": dict(category="beauty", path="Beauty & Personal Care › Makeup › Lips › Lipstick",
                     attributes=["long lasting", "cruelty free", "paraben free", "matte finish", "moisturizing",
                                 "easy carry"],
                     options={"color": ["red", "pink", "nude", "coral", "plum", "wine"]}, price=(5, 28)),
    "deodorant": dict(category="beauty", path="Beauty & Personal Care › Personal Care › Deodorants & Antiperspirants",
                      attributes=["aluminum free", "natural ingredients", "sensitive skin", "long lasting",
                                  "cruelty free"],
                      options={"scent": ["citrus", "lavender", "cedar", "unscented"],
                               "size": ["2.5 ounce", "3 ounce (pack of 2)", "3 ounce (pack of 3)"]}, price=(5, 30)),
    "face moisturizer": dict(category="beauty", path="Beauty & Personal Care › Skin Care › Face › Moisturizers",
                             attributes=["dry skin", "sensitive skin", "hyaluronic acid", "oil free", "fragrance free",
                                         "anti aging"],
                             options={"size": ["1.7 fl oz", "2.5 fl oz", "3.4 fl oz"]}, price=(9, 55)),
    "nail polish": dict(category="beauty", path="Beauty & Personal Care › Foot, Hand & Nail Care › Nail Polish",
                        attributes=["non toxic", "quick dry", "long lasting", "high gloss", "easy apply"],
                        options={"color": ["red", "pink", "nude", "black", "coral", "lilac"]}, price=(4, 20)),
    # electronics
    "headphones": dict(category="electronics", path="Electronics › Headphones, Earbuds & Accessories › Headphones",
                       attributes=["noise cancelling", "wireless bluetooth", "long battery life", "hands free",
                                   "high definition", "easy carry"],
                       options={"color": ["black", "white", "blue", "rose gold"]}, price=(18, 180)),
    "phone case": dict(category="electronics", path="Electronics › Cell Phones & Accessories › Cases & Covers",
                       attributes=["shockproof", "wireless charging", "slim fit", "easy install",
                                   "glass screen protector"],
                       options={"color": ["black", "clear", "navy", "pink", "green"],
                                "size": ["iphone 13", "iphone 14", "iphone 14 pro", "galaxy s22"]}, price=(6, 30)),
    "charging cable": dict(category="electronics", path="Electronics › Computers & Accessories › Cables › USB Cables",
                           attributes=["fast charging", "high speed", "braided nylon", "long lasting", "usb c"],
                           options={"size": ["3 ft", "6 ft", "10 ft"], "color": ["black", "white", "red"]},
                           price=(5, 22)),
    "power bank": dict(category="electronics", path="Electronics › Portable Power › Power Banks",
                       attributes=["fast charging", "high capacity", "usb c", "led display", "easy carry"],
                       options={"size": ["10000mah", "20000mah", "26800mah"], "color": ["black", "white", "blue"]},
                       price=(15, 60)),
    "bluetooth speaker": dict(category="electronics", path="Electronics › Portable Audio & Video › Speakers",
                              attributes=["waterproof", "long battery life", "stereo sound", "high definition",
                                          "easy carry"],
                              options={"color": ["black", "blue", "red", "grey"]}, price=(20, 120)),
    "watch band": dict(category="electronics", path="Electronics › Wearable Technology › Smartwatch Bands",
                       attributes=["quick release", "stainless steel", "easy install", "adjustable", "soft silicone"],
                       options={"color": ["black", "silver", "teal", "rose gold"], "size": ["38mm", "42mm", "44mm"]},
                       price=(7, 35)),
    # fashion
    "running shoes": dict(category="fashion", path="Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
                          attributes=["non slip", "rubber sole", "lightweight", "breathable", "arch support",
                                      "memory foam"],
                          options={"size": ["7", "8", "9", "10", "11", "12"], "color": ["black", "white", "grey",
                                                                                      "navy"]}, price=(30, 130)),
    "t-shirt": dict(category="fashion", path="Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
                    attributes=["machine wash", "short sleeve", "cotton spandex", "slim fit", "classic fit",
                                "moisture wicking"],
                    options={"size": ["small", "medium", "large", "x-large"], "color": ["black", "white", "navy",
                                                                                       "heather grey", "red"]},
                    price=(8, 35)),
    "jeans": dict(category="fashion", path="Clothing, Shoes & Jewelry › Women › Clothing › Jeans",
                  attributes=["slim fit", "machine wash", "button closure", "stretch fabric", "high waist"],
                  options={"size": ["26", "28", "30", "32", "34"], "color": ["light wash", "dark wash", "black"]},
                  price=(20, 80)),
    "winter jacket": dict(category="fashion", path="Clothing, Shoes & Jewelry › Women › Clothing › Coats & Jackets",
                          attributes=["water resistant", "hooded", "fleece lined", "zipper closure", "windproof"],
                          options={"size": ["small", "medium", "large", "x-large"],
                                   "color": ["black", "olive", "burgundy", "navy"]}, price=(35, 160)),
    "socks": dict(category="fashion", path="Clothing, Shoes & Jewelry › Men › Clothing › Socks",
                  attributes=["moisture wicking", "cushioned", "machine wash", "cotton blend", "arch support"],
                  options={"size": ["medium", "large"], "color": ["black", "white", "grey", "multicolor"]},
                  price=(7, 28)),
    "sunglasses": dict(category="fashion", path="Clothing, Shoes & Jewelry › Women › Accessories › Sunglasses",
                       attributes=["polarized", "uv protection", "lightweight", "metal frame"],
                       options={"color": ["black", "tortoise", "gold", "silver"]}, price=(10, 90)),
    # grocery
    "coffee": dict(category="grocery", path="Grocery & Gourmet Food › Beverages › Coffee › Ground Coffee",
                   attributes=["gluten free", "fair trade", "dark roast", "keto friendly", "usda organic",
                               "low acid"],
                   options={"flavor": ["vanilla", "hazelnut", "original", "caramel", "mocha"],
                            "size": ["12 ounce (pack of 1)", "12 ounce (pack of 2)", "2 pound (pack of 1)"]},
                   price=(7, 40)),
    "protein bar": dict(category="grocery", path="Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars",
                        attributes=["gluten free", "low sugar", "high protein", "keto friendly", "non gmo"],
                        options={"flavor": ["chocolate", "peanut butter", "cookie dough", "vanilla almond"],
                                 "size": ["12 count", "15 count", "24 count"]}, price=(12, 45)),
    "green tea": dict(category="grocery", path="Grocery & Gourmet Food › Beverages › Tea › Green Tea",
                      attributes=["usda organic", "non gmo", "individually wrapped", "natural ingredients", "decaf"],
                      options={"flavor": ["jasmine", "mint", "lemon", "original"],
                               "size": ["20 count", "40 count", "100 count"]}, price=(4, 25)),
    "tortilla chips": dict(category="grocery", path="Grocery & Gourmet Food › Snack Foods › Chips & Crisps",
                           attributes=["gluten free", "non gmo", "low sodium", "vegan", "kosher"],
                           options={"flavor": ["sea salt", "lime", "chili", "original"],
                                    "size": ["6 ounce", "11 ounce", "16 ounce (pack of 2)"]}, price=(3, 20)),
    "olive oil": dict(category="grocery", path="Grocery & Gourmet Food › Pantry Staples › Oils › Olive Oil",
                      attributes=["extra virgin", "cold pressed", "usda organic", "non gmo", "kosher"],
                      options={"size": ["16.9 fl oz", "25.3 fl oz", "33.8 fl oz"]}, price=(8, 45)),
    "honey": dict(category="grocery", path="Grocery & Gourmet Food › Pantry Staples › Honey",
                  attributes=["raw", "unfiltered", "usda organic", "non gmo", "kosher"],
                  options={"size": ["12 ounce", "16 ounce", "32 ounce"]}, price=(6, 35)),
    # home
    "coffee table": dict(category="home", path="Home & Kitchen › Furniture › Living Room Furniture › Tables",
                         attributes=["easy assemble", "solid wood", "storage space", "modern design", "metal frame"],
                         options={"color": ["walnut", "black", "white", "natural", "grey"]}, price=(45, 260)),
    "office chair": dict(category="home", path="Home & Kitchen › Furniture › Home Office Furniture › Chairs",
                         attributes=["lumbar support", "adjustable height", "easy assemble", "mesh back",
                                     "heavy duty"],
                         options={"color": ["black", "grey", "white", "blue"]}, price=(50, 300)),
    "sheet set": dict(category="home", path="Home & Kitchen › Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets",
                      attributes=["machine wash", "deep pocket", "wrinkle free", "soft microfiber", "hypoallergenic"],
                      options={"size": ["twin", "full", "queen", "king"], "color": ["white", "grey", "navy",
                                                                                  "sage green"]}, price=(18, 90)),
    "pillow covers": dict(category="home", path="Home & Kitchen › Home Décor › Decorative Pillows & Covers",
                          attributes=["machine wash", "hidden zipper", "super soft", "living room", "decorative"],
                          options={"size": ["16x16 inch", "18x18 inch", "20x20 inch"],
                                   "color": ["beige", "grey", "mustard", "teal"]}, price=(8, 30)),
    "bookshelf": dict(category="home", path="Home & Kitchen › Furniture › Home Office Furniture › Bookcases",
                      attributes=["easy assemble", "storage space", "solid wood", "industrial style", "living room"],
                      options={"color": ["walnut", "black", "white", "rustic brown"]}, price=(40, 220)),
    "desk lamp": dict(category="home", path="Tools & Home Improvement › Lighting & Ceiling Fans › Lamps › Desk Lamps",
                      attributes=["dimmable", "usb charging", "eye caring", "touch control", "energy efficient"],
                      options={"color": ["black", "white", "silver"]}, price=(15, 70)),
}

BRANDS = ["Lunaro", "Velmora", "Kestrel", "Brisa", "Northpeak", "Oakhaven", "Sundew", "Tidewell", "Quillon",
          "Marlow", "Ferncliff", "Halcyon", "Zephra", "Corvid", "Ambrose", "Pinecrest", "Solace", "Rivulet",
          "Emberly", "Crestline", "Wildmere", "Nimbus", "Larkspur", "Driftwood", "Copperleaf", "Bramble", "Aurelia",
          "Stonebay", "Willowby", "Glimmer", "Harbor", "Juniper", "Maplen", "Orchid", "Sablewood", "Trillium"]

FILLERS = ["Makes a great gift for family and friends.", "Backed by a 30-day money back guarantee.",
           "Designed for everyday use at home or on the go.", "Carefully packed to arrive in perfect condition.",
           "Our customer service team is happy to help with any question.", "Tested for quality before it ships."]

REVIEWS = ["Exactly as described, would buy again.", "Good value for the price.", "Works well so far.",
           "Not bad, but shipping took a while.", "Better than I expected.", "Does the job."]

# Instruction phrasings: {a} article, {attrs} the attributes, {type} the product type, {options} the option phrase.
PHRASINGS = [
    "i need {a} {attrs} {type}{options}",
    "i am looking for {a} {type} that is {attrs}{options}",
    "find me {a} {attrs} {type}{options}",
    "i want to buy {a} {type} which is {attrs}{options}",
    "i'm looking for {attrs} {type}{options}",
    "can you get me {a} {attrs} {type}{options}",
]


def _asin(rng: random.Random) -> str:
    return "B0" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(8))


def _title_case(text: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in text.split())


def make_product(rng: random.Random, asin: str, kind: str) -> dict:
    spec = TYPES[kind]
    brand = rng.choice(BRANDS)
    attributes = sorted(rng.sample(spec["attributes"], rng.randint(2, min(4, len(spec["attributes"])))),
                        key=spec["attributes"].index)
    in_title = attributes[:rng.randint(1, 2)]
    title = f"{brand} {_title_case(' '.join(in_title))} {_title_case(kind)}"
    if len(attributes) > len(in_title) and rng.random() < 0.5:
        title += f" with {_title_case(attributes[len(in_title)])}"
    options = {}
    for name, values in spec["options"].items():
        offered = rng.sample(values, rng.randint(min(2, len(values)), len(values)))
        options[name] = sorted(offered, key=values.index)
    lo, hi = spec["price"]
    price = round(rng.uniform(lo, hi)) - 0.01
    if rng.random() < 0.1:  # some products list a range, as scraped ones do; the shop charges a price inside it
        top = round(price * rng.uniform(1.1, 1.5), 2)
        pricing, tag = [price, top], f"${price:.2f} to ${top:.2f}"
        price = round(rng.uniform(price, top), 2)
    else:
        pricing, tag = [price], f"${price:.2f}"
    description = (f"The {brand} {kind} is {' and '.join(attributes)}. {rng.choice(FILLERS)} "
                   f"{rng.choice(FILLERS)}")
    bullets = [f"{_title_case(a)}: {rng.choice(FILLERS)}" for a in attributes[len(in_title):]]
    bullets += rng.sample(FILLERS, 2)
    reviews = [{"score": rng.randint(3, 5), "body": r} for r in rng.sample(REVIEWS, rng.randint(0, 2))]
    rating = round(sum(r["score"] for r in reviews) / len(reviews), 1) if reviews else "N.A."
    return {"asin": asin, "Title": title, "Description": description, "BulletPoints": bullets,
            "Attributes": attributes, "options": options, "pricing": pricing, "Price": tag, "price": price,
            "Rating": rating, "Reviews": reviews, "category": spec["category"], "query": kind,
            "product_category": spec["path"]}


def generate_catalogue(n_products: int, seed: int = 0, types: list[str] | None = None) -> list[dict]:
    """``n_products`` products over the product types (all of TYPES, or ``types``), cycled; deterministic per seed."""
    kinds = list(types or TYPES)
    unknown = sorted(set(kinds) - set(TYPES))
    if unknown:
        raise ValueError(f"unknown product types {unknown}; known: {sorted(TYPES)}")
    rng = random.Random(f"a2rl-webshop-catalogue:{seed}")
    products, asins = [], set()
    for i in range(n_products):
        asin = _asin(rng)
        while asin in asins:
            asin = _asin(rng)
        asins.add(asin)
        products.append(make_product(rng, asin, kinds[i % len(kinds)]))
    return products


def price_bound(price: float, rng: random.Random) -> float:
    """The original's price bound: the larger of two of the next four steps of 10 dollars above the price."""
    steps = [p for p in PRICE_RANGE if p > price][:4]
    if len(steps) < 2:
        return 1_000_000.0
    return sorted(rng.sample(steps, 2))[1]


def make_goal(product: dict, rng: random.Random) -> dict:
    """An instruction for buying ``product``: its type, some of its attributes, an option of each group, a bound."""
    attributes = rng.sample(product["Attributes"], rng.randint(1, min(3, len(product["Attributes"]))))
    options = {name: rng.choice(values) for name, values in product["options"].items()}
    upper = price_bound(product["price"], rng)
    kind = product["query"]
    attrs = " and ".join(attributes)
    if options and rng.random() < 0.5:
        option_text = " with " + ", and ".join(f"{k}: {v}" for k, v in options.items())
    elif options:
        option_text = " in " + " and ".join(f"{v} {k}" for k, v in options.items())
    else:
        option_text = ""
    phrasing = rng.choice(PHRASINGS)
    article = "an" if (attrs if "{a} {attrs}" in phrasing else kind)[0] in "aeiou" else "a"
    text = phrasing.format(a=article, attrs=attrs, type=kind, options=option_text)
    text += f", and price lower than {upper:.2f} dollars"
    return {"asin": product["asin"], "category": product["category"], "query": kind, "name": product["Title"],
            "product_category": product["product_category"], "instruction_text": text, "attributes": attributes,
            "price_upper": upper, "goal_options": options, "search": f"{' '.join(attributes)} {kind}"}


def generate_goals(products: list[dict], n: int, seed: int | str, exclude_asins: set[str] = frozenset(),
                   exclude_texts: set[str] = frozenset()) -> list[dict]:
    """``n`` instructions, each for a distinct product outside ``exclude_asins`` and with a text outside
    ``exclude_texts``; deterministic per seed."""
    rng = random.Random(f"a2rl-webshop-goals:{seed}")
    pool = [p for p in products if p["asin"] not in exclude_asins]
    if n > len(pool):
        raise ValueError(f"{n} instructions need as many target products, but only {len(pool)} are left "
                         f"(raise n_products or lower n_train / n_eval / final_size)")
    goals = []
    for product in rng.sample(pool, len(pool)):
        if len(goals) == n:
            break
        goal = make_goal(product, rng)
        if goal["instruction_text"] not in exclude_texts:
            goals.append(goal)
    if len(goals) < n:
        raise ValueError(f"only {len(goals)} of {n} instructions differ from the excluded ones; raise n_products")
    return goals


class GeneratedShop:
    """The generated catalogue and its instructions by split: a picklable recipe, built where it is used.

    Train instructions are drawn from ``seed``; eval instructions from ``seed`` and ``eval_salt`` (a secret of the
    grading side), for other target products than the train ones and never with a train instruction's text. The
    held-out final instructions (``n_final``) are drawn last, from a seed of their own, for products and with texts
    of neither split: train and eval stay as they were without them."""

    def __init__(self, n_products: int, n_train: int, n_eval: int, seed: int = 0, eval_salt: str = "",
                 types: list[str] | None = None, n_final: int = 0):
        self.n_products, self.n_train, self.n_eval, self.seed = int(n_products), int(n_train), int(n_eval), int(seed)
        self.eval_salt, self.types, self.n_final = str(eval_salt), list(types) if types else None, int(n_final)

    def products(self) -> list[dict]:
        return generate_catalogue(self.n_products, self.seed, self.types)

    def goals(self, products: list[dict]) -> dict[str, list[dict]]:
        train = generate_goals(products, self.n_train, f"train:{self.seed}")
        evals = generate_goals(products, self.n_eval, f"eval:{self.seed}:{self.eval_salt}",
                               exclude_asins={g["asin"] for g in train},
                               exclude_texts={g["instruction_text"] for g in train})
        taken = train + evals
        final = generate_goals(products, self.n_final, f"final:{self.seed}:{self.eval_salt}",
                               exclude_asins={g["asin"] for g in taken},
                               exclude_texts={g["instruction_text"] for g in taken})
        return {"train": train, "eval": evals, "final": final}
