#!/usr/bin/env python3
"""Generate a blind OpenAI Batch input file mixing BlendServe-style request kinds.

Written without looking at how the service orders requests. Stdlib only.

Kinds and chosen proportions (450 requests):
  mmlu     40% (180)  few-shot multiple-choice, prefix shared per subject, max_tokens 1-4
  burst    24% (108)  short chat prompts, max_tokens 16-64
  wildchat 16% ( 72)  system prompt from a pool of 10 + user turn, max_tokens 100-300
  openvid  12% ( 54)  short prompt, long description, max_tokens 200-300
  azure     8% ( 36)  long document, short answer, max_tokens 16-32

Usage: python3 make_file.py [output_path]
"""
import json
import math
import os
import sys
import random

SEED = 1913
MODEL = "SmolLM2-135M-Instruct"
TOTAL = 450
PROPORTIONS = [("mmlu", 0.40), ("burst", 0.24), ("wildchat", 0.16), ("openvid", 0.12), ("azure", 0.08)]
N_SUBJECTS = 64

rng = random.Random(SEED)

# ----------------------------------------------------------------------------- vocabularies
ADJ = """ancient brittle coastal dense elastic fragile gradual hidden humid inverse lateral
marginal minimal nominal opaque partial porous radial rapid rigid rural scarce seasonal
shallow silent sparse stable steep subtle thermal urban vertical volatile warm wide
abrupt acidic adaptive aerial annual arid asymmetric balanced binary bright central
chronic circular collective complex compressed constant crude cyclic delayed diffuse
direct discrete distant domestic dormant dynamic early efficient empirical external
fertile finite fluid formal frozen global granular hollow hybrid implicit indirect
informal initial intense internal irregular isolated linear local lunar magnetic
manual mature mobile modest moist mutual narrow native neutral nocturnal normal
novel orbital organic parallel passive peripheral persistent plural polar primary
private public quiet random rational recurrent regional remote residual robust
saline secondary selective serial simple solar spatial static stochastic structural
symmetric synthetic temporal tidal transient uniform upper viscous visible vital""".split()

NOUN = """aquifer archive basin beacon boundary budget canal catalyst cell channel charter
circuit climate colony compound contract corridor crater creditor current cycle delta
deposit doctrine drainage ecosystem electrode enzyme equilibrium estuary fault ferment
filter flux forest fossil frontier furnace garrison glacier gradient granary harbor
harvest hormone hull index inflation interval isotope junction kernel lattice ledger
lens lever license lineage magnet manuscript margin market membrane meridian mineral
monopoly mortgage nucleus orbit organism outpost parish patent pendulum pigment
pipeline plateau pollen portfolio predator prism protein pulse quarry quota reactor
reef reservoir resin ridge rotor salinity sediment sensor settlement shoreline signal
solvent spectrum spindle statute subsidy surplus syntax tariff tendon terrace texture
threshold tissue token treaty turbine valve vector vessel voltage watershed wetland
yield alloy antibody axis ballot bandwidth barometer battery cartel census cipher
clause coefficient compass consensus coupon cylinder dialect dividend dynasty emission
epoch excise fabric fiber guild habitat infantry irrigation kiln lagoon levy loom""".split()

VERB = """absorb accelerate adjust alter amplify anchor balance block buffer calibrate
compress conduct constrain convert dampen decay deflect deplete dilute disperse
displace distort divert elevate emit erode expand extract filter fragment generate
inhibit insulate invert isolate leach limit magnify migrate moderate neutralize
offset oxidize precede preserve reduce reflect regulate reinforce release replace
restrict reverse rotate saturate shield simulate stabilize stimulate suppress sustain
transfer transmit trigger weaken""".split()

ADV = """gradually sharply slightly steadily rarely consistently abruptly partially
indirectly predictably unevenly seasonally periodically temporarily permanently""".split()

PLACES = """the northern valley|a coastal village|the old harbor district|a mountain pass|the
river delta|a desert outpost|the city archive|a research station|the eastern provinces|a
small island|the industrial quarter|a farming cooperative|the central plateau|a border town|
the university laboratory|a rural clinic|the federal court|a regional museum|the upper
watershed|a fishing port""".replace("\n", " ").split("|")
PLACES = [p.strip() for p in PLACES]

NAMES = """Amara Bruno Celine Dmitri Elena Farid Greta Hiroshi Ines Jonas Kavya Lorenzo Mei
Nadia Oskar Priya Quentin Rosa Samir Tomas Ulla Viktor Wen Xavier Yara Zoltan Ada Bilal
Chiara Dario Esme Felix Gita Hugo Ilse Jamal Keiko Luca Marta Nils Olga Pavel Rania Sven
Talia Umar Vera Willem""".split()

ACTIVITIES = """baking sourdough|learning the guitar|training for a half marathon|planting a
vegetable garden|studying for a chemistry exam|fixing an old bicycle|writing a short story|
organizing a team offsite|learning Spanish|painting with watercolors|building a bookshelf|
planning a road trip|saving for a new laptop|keeping a journal|learning to code in
Python|brewing coffee at home|repotting houseplants|teaching my kid to swim|running a book
club|cleaning up my email inbox|preparing a job interview|decorating a small
apartment|learning chess openings|taking film photographs|volunteering at a shelter""".replace("\n", " ").split("|")
ACTIVITIES = [a.strip() for a in ACTIVITIES]

THINGS = """bakery|podcast|newsletter|hiking group|board game café|tutoring service|bike
repair shop|pottery studio|mobile app|food truck|plant nursery|dog walking
business|recipe blog|coworking space|secondhand bookshop|yoga class|soap
company|travel agency|robotics club|candle shop""".replace("\n", " ").split("|")
THINGS = [t.strip() for t in THINGS]

TONES = ["more formal", "friendlier", "shorter", "more persuasive", "less technical",
         "more polite", "funnier", "more confident", "clearer", "more neutral"]

PERIODS = ["weeks", "months", "years", "days"]

# ----------------------------------------------------------------------------- generic text
def a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def np_(r, nouns=NOUN):
    k = r.random()
    if k < 0.35:
        return f"the {r.choice(ADJ)} {r.choice(nouns)}"
    if k < 0.6:
        return f"the {r.choice(nouns)} of the {r.choice(nouns)}"
    if k < 0.8:
        return a(r.choice(ADJ)) + " " + r.choice(nouns)
    return f"the {r.choice(nouns)}"


SENT_TEMPLATES = [
    "{NP} tends to {v} {NP2} {adv}, especially in {place}.",
    "In {place}, {np} was found to {v} {NP2} over several {period}.",
    "Most observers agree that {np} can {v} {np2} when conditions are {adj}.",
    "{Name} argued that {np} would {v} {np2}, but the evidence remained {adj}.",
    "This is why {np} is often described as {adj} rather than {adj2}.",
    "A later survey of {place} showed that {np} does not always {v} {np2}.",
    "Because {np} is {adj}, small changes can {v} {np2} {adv}.",
    "The report noted that {np} began to {v} {np2} after the {noun} was replaced.",
    "In practice, engineers try to {v} {np} without disturbing {np2}.",
    "{Name} and {Name2} measured {np} at {num} sites and recorded {adj} results.",
    "Over the last {num} {period}, {np} has continued to {v} {np2}.",
    "Critics point out that {np} is rarely {adj} for long.",
    "Nobody expected {np} to {v} {np2} so {adv}.",
    "When {np} becomes {adj}, it usually starts to {v} {np2}.",
    "The committee in {place} proposed a plan to {v} {np} by {num} percent.",
    "Unlike {np}, {np2} remains {adj} throughout the year.",
    "Records from {place} suggest that {np} once helped {v} {np2}.",
    "One common mistake is to assume that {np} will {v} {np2} on its own.",
    "According to {Name}, {np} and {np2} are linked more closely than they appear.",
    "The budget for {np} was raised to {num} thousand after a {adj} season.",
]


def cap(s):
    return s[0].upper() + s[1:]


def sentence(r, nouns=NOUN):
    t = r.choice(SENT_TEMPLATES)
    np1, np2 = np_(r, nouns), np_(r, nouns)
    s = t.format(NP=cap(np1), np=np1, NP2=np2, np2=np2, v=r.choice(VERB), adv=r.choice(ADV),
                 place=r.choice(PLACES), period=r.choice(PERIODS), adj=r.choice(ADJ),
                 adj2=r.choice(ADJ), Name=r.choice(NAMES), Name2=r.choice(NAMES),
                 noun=r.choice(nouns), num=r.randint(2, 90))
    return cap(s)


def paragraph(r, n_min=3, n_max=7, nouns=NOUN):
    return " ".join(sentence(r, nouns) for _ in range(r.randint(n_min, n_max)))


def text_of_length(r, lo, hi, nouns=NOUN):
    target = r.randint(lo, hi)
    parts = []
    total = 0
    while total < target:
        p = paragraph(r, 3, 6, nouns)
        parts.append(p)
        total += len(p) + 2
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------- MMLU-like
SUBJ_PREFIX = """Applied Comparative Introductory Advanced Clinical Historical Computational
Marine Urban Agricultural Theoretical Environmental Industrial Medieval Modern
Quantitative Regional Structural Cognitive Molecular Coastal Tropical Forensic Early""".split()
SUBJ_FIELD = """Hydrology Numismatics Econometrics Phonology Epidemiology Metallurgy Cartography
Jurisprudence Ornithology Seismology Toxicology Paleography Limnology Glaciology Acoustics
Horticulture Mycology Petrology Demography Lexicography Ethnobotany Apiculture Tribology
Rheology Viticulture Pharmacology Topology Cryptography Logistics Accounting Taxation
Diplomacy Archaeology Linguistics Sociology Thermodynamics Optics Genetics Immunology
Forestry Oceanography Meteorology Architecture Musicology Rhetoric Ethics Statistics
Microeconomics Macroeconomics Astronomy Geodesy Nutrition Anatomy Ecology""".split()
SUBJ_LEVEL = ["High School", "College", "Professional", "Graduate"]


def make_subjects(r, n):
    out = set()
    while len(out) < n:
        k = r.random()
        f = r.choice(SUBJ_FIELD)
        if k < 0.55:
            out.add(f"{r.choice(SUBJ_PREFIX)} {f}")
        elif k < 0.8:
            out.add(f"{r.choice(SUBJ_LEVEL)} {f}")
        elif k < 0.92:
            out.add(f"{f} of {r.choice(['Wetlands', 'Cities', 'the Baltic', 'Small Firms', 'Islands', 'Deserts', 'Rivers', 'Trade Routes', 'Mountain Regions', 'Public Health'])}")
        else:
            out.add(f)
    lst = sorted(out)
    r.shuffle(lst)
    return lst


HEADERS = [
    "The following are multiple choice questions (with answers) about {s}.",
    "Below are practice exam questions in {s}. Each question has four options and the correct letter is given.",
    "Multiple-choice review: {s}. Read each question and choose the single best answer.",
    "These questions are taken from a {s} qualifying exam. Answers are shown after each item.",
    "Sample items for the {s} section, with answer keys.",
    "Here are some worked examples of {s} questions. Pick A, B, C or D.",
]

STEMS = [
    "In {s}, which of the following most accurately describes the role of {np} in {ctx}?",
    "A researcher studying {np} in {place} notices that it {adv} fails to {v} {np2}. Which of the following is the most likely explanation?",
    "Which of the following statements about {np} is correct?",
    "According to the standard account in {s}, {np} is primarily associated with which of the following?",
    "Suppose that {np} were to {v} {np2}. What would be the expected effect on {np3}?",
    "Which of the following is NOT a characteristic of {np}?",
    "The term \"{term}\" in {s} refers to",
    "{Name} claims that {np} always acts to {v} {np2}. Which observation would most directly weaken this claim?",
    "A {adj} {noun} is placed next to {np}. Which outcome is most consistent with established principles?",
    "Which of the following best explains why {np} is considered {adj} in most textbooks of {s}?",
    "During a field study, {Name} recorded that {np} changed {adv} over {num} {period}. Which factor is the most probable cause?",
    "Which pair of concepts is most closely related in {s}?",
]

OPTION_FORMS = [
    lambda r, n: f"an increase in {np_(r, n)}",
    lambda r, n: f"a decrease in {np_(r, n)}",
    lambda r, n: cap(np_(r, n)),
    lambda r, n: f"It tends to {r.choice(VERB)} {np_(r, n)}",
    lambda r, n: f"{cap(r.choice(ADJ))} {r.choice(n)} combined with {np_(r, n)}",
    lambda r, n: f"The {r.choice(n)} and the {r.choice(n)}",
    lambda r, n: f"Only when {np_(r, n)} is {r.choice(ADJ)}",
    lambda r, n: f"It is unrelated to {np_(r, n)}",
    lambda r, n: f"Because {np_(r, n)} cannot {r.choice(VERB)} {np_(r, n)}",
]

SYLL = ["ka", "ro", "ven", "tel", "mi", "sor", "an", "qui", "dra", "lo", "pex", "un", "ter", "bal", "is", "cho"]


def term(r):
    return "".join(r.choice(SYLL) for _ in range(r.randint(2, 4))) + r.choice(["ism", "ation", " effect", " index", " ratio", " rule"])


def mc_question(r, subject, nouns):
    """Returns (text_without_answer, answer_letter)."""
    if r.random() < 0.18:
        # numeric item
        base = r.randint(20, 900)
        pct = r.choice([5, 10, 12, 15, 20, 25, 30, 40, 50])
        up = r.random() < 0.5
        noun = r.choice(nouns)
        qty = r.choice(["capacity", "mass", "output", "volume", "length", "price", "density", "count"])
        correct = round(base * (1 + pct / 100) if up else base * (1 - pct / 100), 1)
        wrong = {round(base * (1 + (pct + 5) / 100), 1), round(base * (1 - (pct - 3) / 100), 1),
                 round(base + pct, 1), round(base * pct / 100, 1), round(base * (1 - pct / 100) if up else base * (1 + pct / 100), 1)}
        wrong.discard(correct)
        opts = [correct] + r.sample(sorted(wrong), 3)
        r.shuffle(opts)
        stem = (f"A {noun} in {r.choice(PLACES)} has {a(qty)} of {base} units. If its {qty} "
                f"{'rises' if up else 'falls'} by {pct} percent, what is the new {qty}?")
        ans = "ABCD"[opts.index(correct)]
        opts = [f"{o:g}" for o in opts]
    else:
        t = r.choice(STEMS)
        stem = t.format(s=subject, np=np_(r, nouns), np2=np_(r, nouns), np3=np_(r, nouns),
                        ctx=r.choice(["a closed system", "early models", "field conditions",
                                      "the classical framework", "modern practice", r.choice(PLACES)]),
                        place=r.choice(PLACES), adv=r.choice(ADV), v=r.choice(VERB),
                        term=term(r), Name=r.choice(NAMES), adj=r.choice(ADJ), noun=r.choice(nouns),
                        num=r.randint(2, 40), period=r.choice(PERIODS))
        if r.random() < 0.3:
            stem = sentence(r, nouns) + " " + stem
        stem = cap(stem)
        forms = r.sample(OPTION_FORMS, 4) if r.random() < 0.5 else [r.choice(OPTION_FORMS)] * 4
        opts = [f(r, nouns) for f in forms]
        opts = [cap(o) for o in opts]
        ans = r.choice("ABCD")
    body = stem + "\n" + "\n".join(f"{L}. {o}" for L, o in zip("ABCD", opts)) + "\nAnswer:"
    return body, ans


def make_prefix(r, subject, nouns):
    target = r.randint(2100, 3900)
    header = r.choice(HEADERS).format(s=subject.lower() if r.random() < 0.5 else subject)
    parts = [header]
    total = len(header)
    while total < target:
        q, ans = mc_question(r, subject, nouns)
        block = q + " " + ans
        parts.append(block)
        total += len(block) + 2
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------- BurstGPT-like
BURST_OPENERS = ["Hey!", "Hi there.", "Quick question.", "Hello,", "Okay so", "Hi, hope you're well.",
                 "Good morning!", "Help please:", "Hey, random one for you.", "So here's my situation."]
BURST_CONTEXT = [
    "I've been {act} for about {n} {period} and I'm starting to lose motivation.",
    "My friend {Name} suggested I ask you about this.",
    "I'm thinking about starting a small {thing} in my neighborhood.",
    "Last weekend I tried {act} for the first time and it went badly.",
    "I only have about {n} minutes a day for this, so keep that in mind.",
    "My budget is pretty tight, maybe {n}0 dollars at most.",
    "I already read a couple of articles but they contradicted each other.",
    "My partner thinks I'm overthinking it, which is probably true.",
    "I live in a small apartment with no balcony, if that matters.",
    "I tend to give up when things get repetitive.",
    "We have a deadline on {day}, so this is a bit urgent.",
    "I'm a complete beginner, so please don't assume I know the jargon.",
]
BURST_ASKS = [
    "Can you suggest a catchy name for my {thing}?",
    "What's the one thing I should focus on first?",
    "Give me three quick tips for {act}.",
    "Rewrite this sentence so it sounds {tone}: \"{sent}\"",
    "Is it worth it, yes or no, and why in one line?",
    "What's the difference between {noun} and {noun2} in simple words?",
    "Can you explain what {a_noun} is like I'm ten?",
    "How long would it realistically take to get decent at {act}?",
    "Write a one-line tagline for a {thing}.",
    "What should I say to {Name} to politely decline?",
    "Summarize this in one sentence: \"{sent} {sent2}\"",
    "Any quick idea for a fun weekend activity nearby?",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def fill(r, t):
    return t.format(act=r.choice(ACTIVITIES), n=r.randint(2, 12), period=r.choice(PERIODS),
                    Name=r.choice(NAMES), thing=r.choice(THINGS), day=r.choice(DAYS),
                    tone=r.choice(TONES), sent=sentence(r), sent2=sentence(r),
                    noun=r.choice(NOUN), noun2=r.choice(NOUN), a_noun=a(r.choice(NOUN)))


def burst_prompt(r):
    target = r.randint(420, 1150)
    parts = [r.choice(BURST_OPENERS)]
    ask = fill(r, r.choice(BURST_ASKS))
    total = len(parts[0]) + len(ask)
    ctx = BURST_CONTEXT[:]
    r.shuffle(ctx)
    i = 0
    while total < target:
        s = fill(r, ctx[i % len(ctx)]) if i < len(ctx) else sentence(r)
        parts.append(s)
        total += len(s) + 1
        i += 1
    parts.append(ask)
    return " ".join(parts)


# ----------------------------------------------------------------------------- WildChat-like
SYSTEM_PROMPTS = [
    "You are a helpful, patient writing assistant. When the user shares a draft, point out unclear sentences, "
    "suggest concrete rewrites, and keep the author's voice. Avoid lecturing, keep feedback organized as a short "
    "list, and never invent facts that were not in the original text.",
    "You are CodeBuddy, an experienced software engineer who explains programming concepts clearly. Prefer small, "
    "runnable examples over long theory. If the user's question is ambiguous, state your assumption in one line and "
    "continue. Use plain language and mention common pitfalls when relevant.",
    "You are a friendly travel planner. Help the user build realistic itineraries that respect their budget, "
    "pace and interests. Always mention transport between stops, suggest one rainy-day alternative, and keep the "
    "tone upbeat but practical. Do not recommend specific hotels by name.",
    "You are a careful study tutor for secondary-school and first-year university students. Break explanations "
    "into steps, check understanding with a short question at the end, and use everyday analogies. If the student "
    "asks for the answer to homework, guide them toward it instead of giving it outright, unless they already "
    "attempted it.",
    "You are an assistant for a small business owner. You draft emails, product descriptions, and social media "
    "posts. Keep copy concise, warm, and free of exaggerated claims. When asked for options, give exactly three "
    "variants with different tones.",
    "You are a creative storytelling partner. Continue stories in the style the user establishes, keep characters "
    "consistent, and introduce one small surprise per reply. Avoid graphic violence. Write in vivid, concrete "
    "prose and end each reply at a natural pause so the user can steer what happens next.",
    "You are a meticulous summarization engine used inside a corporate knowledge base. Produce neutral, factual "
    "summaries with headings, preserve numbers and names exactly, and flag any statement in the source that seems "
    "contradictory. Never add opinions.",
    "You are a supportive fitness and nutrition coach. Give general, safe advice suitable for healthy adults, "
    "suggest gradual progressions, and remind the user to consult a professional for medical conditions. Keep "
    "plans simple enough to follow on a busy schedule.",
    "You are a translator and language coach. Translate text faithfully, then explain two or three interesting "
    "word choices or grammar points. If idioms do not carry over, offer a natural equivalent and explain the "
    "difference briefly. Keep explanations accessible to intermediate learners.",
    "You are an analytical assistant for researchers. Answer with structured reasoning: restate the question, list "
    "the relevant considerations, weigh them, and give a clear conclusion with stated uncertainty. Cite the kinds of "
    "sources that would support each point, but do not fabricate specific references.",
]
WILD_TASKS = [
    "Can you improve the following paragraph for a blog post? Keep it about the same length.",
    "Please summarize the text below and list the main open questions it raises.",
    "Continue this story for a few more paragraphs. Here is what I have so far:",
    "I need to turn these notes into a clear email to my team. Notes:",
    "Explain what the following passage means, step by step, as if I'm new to the topic.",
    "Translate the gist of this into simpler English and point out anything confusing:",
    "Plan a {n}-day schedule around the situation described below.",
    "Write three possible product descriptions based on these details:",
    "Critique the argument in the following text. Where is it weakest?",
    "Turn the following into a short study guide with key terms:",
    "Based on the description below, suggest a weekly routine I could realistically follow.",
]
WILD_TAILS = [
    "Thanks a lot!", "Please keep it under 200 words.", "Use bullet points if it helps.",
    "Don't change the names.", "Make it sound natural, not robotic.", "", "",
    "I'm a bit in a hurry, so be concise.", "Feel free to ask if something is unclear.",
]


def wild_user(r):
    task = fill(r, r.choice(WILD_TASKS)).replace("{n}", str(r.randint(2, 7)))
    if "{n}" in task:
        task = task.format(n=r.randint(2, 7))
    body = text_of_length(r, 350, 1850)
    # keep within ~100-500 tokens
    body = body[:1900]
    if not body.endswith("."):
        cut = body.rfind(".")
        body = body[:cut + 1] if cut > 200 else body
    tail = r.choice(WILD_TAILS)
    return (task + "\n\n" + body + ("\n\n" + tail if tail else "")).strip()


# ----------------------------------------------------------------------------- OpenVid-like
VID_SUBJECTS = ["a red fox crossing a snowy meadow", "a street market at dusk", "waves breaking against black rocks",
                "a chef plating a dessert", "a hot air balloon rising over vineyards", "a child flying a kite on a beach",
                "rain falling on a neon-lit alley", "a hummingbird feeding from a flower", "an old steam train in the mountains",
                "a potter shaping clay on a wheel", "a time-lapse of clouds over a desert canyon", "a cyclist riding through autumn woods",
                "a lighthouse during a storm", "jellyfish drifting in dark water", "a busy airport terminal", "a dancer rehearsing in an empty studio",
                "fireflies over a pond at night", "a robot arm assembling a watch", "a family cooking dumplings together",
                "a sailboat leaving a quiet harbor", "snow falling on a mountain village", "a drone shot over rice terraces"]
VID_STYLES = ["cinematic", "documentary-style", "dreamy and slow-motion", "handheld and gritty", "bright and cheerful",
              "moody film-noir", "nature-documentary", "vintage 16mm", "hyper-realistic", "soft pastel"]
VID_ASKS = [
    "Write a detailed description of a {sec}-second {style} video showing {subj}. Describe the camera movement, lighting, colors, textures and how the scene changes over time.",
    "Describe, shot by shot, a {style} clip of {subj}. Include framing, motion, sound, and atmosphere in rich detail.",
    "Generate a long, vivid caption for a video of {subj}, filmed in a {style} way. Mention every visual element from the foreground to the background.",
    "I need a very detailed prompt for a text-to-video model: {subj}, {style}, about {sec} seconds. Describe the scene thoroughly.",
    "Please give a thorough visual description of {subj} as it would appear in a {style} short film, including the weather, the light, and small details a viewer might notice.",
]


def vid_prompt(r):
    s = r.choice(VID_ASKS).format(sec=r.choice([5, 8, 10, 15, 20, 30]), style=r.choice(VID_STYLES), subj=r.choice(VID_SUBJECTS))
    if r.random() < 0.5:
        s += " " + r.choice(["Make it feel calm.", "Emphasize motion.", f"The mood should be {r.choice(ADJ)}.",
                             "Include the time of day.", "Avoid any text overlays.", f"Set it near {r.choice(PLACES)}."])
    return s


# ----------------------------------------------------------------------------- Azure-like
DOC_TITLES = ["Quarterly operations report", "Incident review", "Meeting minutes", "Project proposal",
              "Field survey notes", "Policy draft", "Customer feedback digest", "Maintenance log summary",
              "Grant application excerpt", "Internal audit memo"]
DOC_ASKS = ["Summarize the document above in one sentence.", "What is the main conclusion? Answer briefly.",
            "Give a short title for this document.", "List the two most important points, very briefly.",
            "Is the overall tone positive or negative? One word and a reason.", "Who is mentioned most often? Answer briefly."]


def azure_prompt(r):
    title = f"{r.choice(DOC_TITLES)}: {cap(np_(r))} ({r.choice(PLACES)})"
    body = text_of_length(r, 4200, 9800)
    return f"{title}\n\n{body}\n\n{r.choice(DOC_ASKS)}"


# ----------------------------------------------------------------------------- assemble
def main(out_path):
    counts = {k: int(round(p * TOTAL)) for k, p in PROPORTIONS}
    diff = TOTAL - sum(counts.values())
    counts["mmlu"] += diff

    subjects = make_subjects(rng, N_SUBJECTS)
    subj_nouns = {s: rng.sample(NOUN, 14) for s in subjects}
    prefixes = {s: make_prefix(rng, s, subj_nouns[s]) for s in subjects}
    # every subject gets one question, the rest follow skewed weights
    weights = [rng.lognormvariate(0, 1.0) for _ in subjects]
    assign = list(subjects) + rng.choices(subjects, weights=weights, k=counts["mmlu"] - len(subjects))

    reqs = []  # (kind, messages, max_tokens)
    for s in assign:
        q, _ = mc_question(rng, s, subj_nouns[s])
        reqs.append(("mmlu", [{"role": "user", "content": prefixes[s] + "\n\n" + q}], rng.randint(1, 4)))
    for _ in range(counts["burst"]):
        reqs.append(("burst", [{"role": "user", "content": burst_prompt(rng)}], rng.randint(16, 64)))
    for _ in range(counts["wildchat"]):
        reqs.append(("wildchat", [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)},
                                  {"role": "user", "content": wild_user(rng)}], rng.randint(100, 300)))
    for _ in range(counts["openvid"]):
        reqs.append(("openvid", [{"role": "user", "content": vid_prompt(rng)}], rng.randint(200, 300)))
    for _ in range(counts["azure"]):
        reqs.append(("azure", [{"role": "user", "content": azure_prompt(rng)}], rng.randint(16, 32)))

    rng.shuffle(reqs)

    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    total_chars = 0
    per_kind = {}
    chars_kind = {}
    with open(out_path, "w", encoding="utf-8") as f:
        for i, (kind, msgs, mt) in enumerate(reqs):
            line = {"custom_id": f"blind-{i:04d}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": MODEL, "messages": msgs, "max_tokens": mt, "temperature": 0}}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            c = sum(len(m["content"]) for m in msgs)
            total_chars += c
            per_kind[kind] = per_kind.get(kind, 0) + 1
            chars_kind[kind] = chars_kind.get(kind, 0) + c
    size = os.path.getsize(out_path)
    used = len(set(assign))
    print(f"wrote {len(reqs)} requests to {out_path} ({size} bytes); per kind: "
          + ", ".join(f"{k}={per_kind[k]} ({chars_kind[k]} chars)" for k, _ in PROPORTIONS)
          + f"; total prompt chars={total_chars}; distinct subjects={used}; seed={SEED}")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "blind.jsonl"))
