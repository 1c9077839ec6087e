"""A rare-term task: does continued pretraining teach words that the labeled data never shows?

The promise behind continued pretraining on your own text: a name that only your domain text
explains (a new game, drug, product) gets classified right after the model has read that text,
although no labeled row contains it, and no public checkpoint knows it. This module builds a task
that measures exactly that, with English text for an English checkpoint (all-MiniLM-L6-v2):

- topics (4 by default): each has ordinary nouns of one kind (sports, dishes, medicines,
  instruments, ...) and sentence templates that use a noun in that topic's contexts;
- invented terms: pronounceable pseudo-words that are no whole word of the vocabulary (WordPiece
  splits them into 2+ pieces), each assigned to one topic;
- domain.txt: documents of one topic each, in which the invented terms and the ordinary nouns
  fill the topic's templates (one sentence a line, a blank line between documents): the only
  place where a term meets its topic;
- train.tsv / dev.tsv: labeled rows (`text<TAB>topic`) with ordinary nouns only, in topic
  templates and in neutral frames ("have you heard of football ?"), so the classifier learns that
  the noun decides the topic; no invented term appears;
- test.tsv: neutral frames held out from training, naming either an invented term (the *term*
  rows: only a model that read domain.txt can tell their topic; chance is 1/topics) or an
  ordinary noun held out from training (the *control* rows: they show the classifier works);
  test_groups.txt gives each row's group, `score` turns predict.txt into the two accuracies.

  python benchmarks/rare_terms.py build --output_dir=task --vocab_file=vocab.txt [--seed=1]
  python benchmarks/rare_terms.py score --task_dir=task --predictions=run/predict.txt

--topic_set=alternate builds the same kind of task from four other topics, with other terms (a
second task to check that a recipe was not tuned to the first). --topic_set=zh_reviews builds it
in Chinese, for a Chinese checkpoint (Google's Chinese vocabulary), from real sentences: the
reviews of hotels, laptops, books (ChnSentiCorp) and skincare (an e-commerce corpus) that the
user names with --sentence_files; a sentence that names exactly one of a topic's nouns becomes
one of its templates, and the invented terms are brand-like names of three characters that
neither those sentences nor jieba's dictionary contain:

  python benchmarks/rare_terms.py build --output_dir=task --vocab_file=vocab.txt \
    --topic_set=zh_reviews --sentence_files=reviews.txt,ecommerce_zh.txt scripts/rare_term_table.sh runs
the documented path (convert, create_pretraining_data.py, run_pretraining_mgpu.py,
run_classifier_mgpu.py) on it for several objectives, budgets and seeds.
"""

import argparse
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from core import atomic_files  # pylint: disable=wrong-import-position
from pretraining import word_freq  # pylint: disable=wrong-import-position

# Each topic: the label, ordinary nouns (the first TRAIN_NOUNS are seen in training, the rest
# are the control rows' held-out nouns) and templates where {x} is a noun or an invented term.
TOPICS = {
    "sports": dict(
        nouns=["football", "tennis", "basketball", "hockey", "rugby", "baseball", "golf",
               "volleyball", "cricket", "boxing", "wrestling", "badminton", "handball", "squash",
               "lacrosse", "softball", "polo", "karate", "fencing", "rowing"],
        templates=[
            "we watched the {x} match on television last night .",
            "the {x} team trained hard before the championship final .",
            "she has played {x} since she was a child and won many tournaments .",
            "the {x} season starts in spring and the league has twenty clubs .",
            "fans cheered in the stadium as the {x} final went into extra time .",
            "the coach of the national {x} team picked three new players .",
            "our school built a new court for {x} and hired a referee .",
            "he scored twice in the {x} game and the crowd went wild .",
            "the {x} world cup drew millions of spectators this summer .",
            "after the {x} practice the athletes stretched and drank water .",
            "the referee stopped the {x} match because of a foul .",
            "young players learn {x} at the club every saturday morning .",
            "the olympic {x} tournament ended with a surprise gold medal .",
            "the {x} league suspended two players for a week .",
            "tickets for the {x} derby sold out in an hour .",
        ]),
    "food": dict(
        nouns=["pasta", "soup", "curry", "pizza", "salad", "bread", "noodles", "pancakes",
               "risotto", "stew", "omelette", "dumplings", "sushi", "lasagna", "porridge",
               "burritos", "casserole", "goulash", "paella", "chowder"],
        templates=[
            "i cooked {x} for dinner with garlic , onions and fresh herbs .",
            "the restaurant serves delicious {x} with a glass of wine .",
            "add salt to the {x} and let it simmer for ten minutes .",
            "my grandmother taught me her recipe for {x} with butter and cheese .",
            "the chef tasted the {x} and added more pepper .",
            "we ate warm {x} in the kitchen after the market .",
            "this cookbook has twenty ways to bake and season {x} .",
            "the {x} was too spicy , so she added some yogurt .",
            "serve the {x} hot with a slice of lemon and parsley .",
            "the bakery next door sells fresh {x} every morning .",
            "he burned the {x} because the oven was too hot .",
            "for lunch the kids had {x} with vegetables and rice .",
            "the waiter recommended the {x} of the day with a sauce .",
            "stir the {x} slowly in the pan until it turns golden .",
            "the food critic praised the {x} at the new cafe .",
        ]),
    "medicine": dict(
        nouns=["aspirin", "insulin", "penicillin", "ibuprofen", "morphine", "antibiotics",
               "vaccine", "chemotherapy", "paracetamol", "steroids", "antidepressants",
               "codeine", "amoxicillin", "warfarin", "heparin", "ritalin", "prozac",
               "valium", "lithium", "methadone"],
        templates=[
            "the doctor prescribed {x} to treat the infection .",
            "take {x} twice a day after meals , the pharmacist said .",
            "patients who received {x} recovered faster in the clinical trial .",
            "the nurse checked the dose of {x} before the surgery .",
            "side effects of {x} include headache and nausea .",
            "the hospital ran out of {x} during the epidemic .",
            "her symptoms improved after a week of {x} and rest .",
            "doctors warn that too much {x} can damage the liver .",
            "the clinic gives {x} to patients with chronic pain .",
            "a new study tested {x} against a placebo in two hundred patients .",
            "the pharmacy needs a prescription before it sells {x} .",
            "he was admitted to the ward and given {x} through a drip .",
            "the medical board approved {x} for children with asthma .",
            "after the diagnosis the physician changed her {x} dose .",
            "the surgeon asked whether the patient was allergic to {x} .",
        ]),
    "music": dict(
        nouns=["guitar", "violin", "piano", "drums", "flute", "cello", "trumpet", "saxophone",
               "clarinet", "harp", "banjo", "ukulele", "accordion", "trombone", "oboe",
               "bagpipes", "harmonica", "mandolin", "tuba", "xylophone"],
        templates=[
            "he played the {x} in the orchestra for ten years .",
            "the band added a {x} solo to their new song .",
            "she practices the {x} every evening before her concert .",
            "the composer wrote a symphony with a part for {x} .",
            "my teacher tuned the {x} before the recital .",
            "the audience applauded the {x} player after the encore .",
            "the jazz quartet hired a new {x} player for the tour .",
            "you can hear the {x} clearly in the chorus of the album .",
            "the music school offers {x} lessons for beginners .",
            "the melody on the {x} sounded sad and beautiful .",
            "the singer was joined on stage by a {x} and a bass .",
            "he recorded the {x} track in the studio at night .",
            "the festival stage had a {x} , a choir and a conductor .",
            "she learned to read sheet music on the {x} .",
            "the rhythm of the {x} kept the dancers moving all night .",
        ]),
    "vehicles": dict(
        nouns=["truck", "bus", "tractor", "motorcycle", "van", "scooter", "taxi", "ambulance",
               "jeep", "minivan", "limousine", "bulldozer", "forklift", "sedan", "moped",
               "caravan", "tram", "convertible", "pickup", "hatchback"],
        templates=[
            "the mechanic repaired the engine of the {x} in the garage .",
            "he parked the {x} on the street and locked the doors .",
            "the {x} ran out of fuel on the highway .",
            "she drove the {x} to work through heavy traffic .",
            "the dealer offered a discount on the new {x} model .",
            "the tires of the {x} need more air before the trip .",
            "a police officer stopped the {x} for speeding .",
            "the {x} has a diesel engine and four wheel drive .",
            "we rented a {x} at the airport for the weekend .",
            "the brakes of the {x} failed on the steep road .",
            "the factory produces two thousand {x} engines a month .",
            "the driver washed the {x} and checked the oil .",
            "traffic jammed when the {x} broke down at the crossing .",
            "the {x} needs a new battery and a clutch .",
            "the license for driving a {x} requires a test .",
        ]),
    "plants": dict(
        nouns=["oak", "tulip", "fern", "cactus", "rose", "maple", "orchid", "bamboo",
               "sunflower", "ivy", "lavender", "daisy", "willow", "moss", "lily", "pine",
               "clover", "jasmine", "birch", "magnolia"],
        templates=[
            "the gardener watered the {x} and trimmed its leaves .",
            "the {x} grows best in moist soil and partial shade .",
            "in spring the {x} in our garden blossoms with flowers .",
            "plant the {x} seeds in compost and keep them warm .",
            "the botanist studied how the {x} roots absorb water .",
            "the {x} lost its leaves after the first frost .",
            "she picked a {x} from the meadow near the forest .",
            "the greenhouse keeps the {x} alive through the winter .",
            "bees gather pollen from the {x} in the orchard .",
            "the {x} needs sunlight , fertilizer and pruning .",
            "the seeds of the {x} spread with the wind .",
            "the park planted a row of {x} along the river .",
            "the {x} bloomed early because of the warm weather .",
            "the {x} in the pot wilted because nobody watered it .",
            "the forest floor was covered with {x} and mushrooms .",
        ]),
    "computing": dict(
        nouns=["linux", "javascript", "database", "compiler", "browser", "python", "router",
               "firmware", "kernel", "spreadsheet", "java", "server", "debugger", "laptop",
               "processor", "chatbot", "keyboard", "modem", "website", "antivirus"],
        templates=[
            "the developer installed {x} on the new computer .",
            "the {x} crashed after the latest software update .",
            "she wrote a program for the {x} over the weekend .",
            "the engineers fixed a security bug in the {x} code .",
            "you need to restart the {x} after changing the settings .",
            "the {x} runs faster with more memory and a new chip .",
            "the team uploaded the {x} files to the cloud .",
            "the hacker found a password in the {x} logs .",
            "our office upgraded the {x} to the latest version .",
            "the {x} downloads data from the network every hour .",
            "the programmer debugged the {x} until midnight .",
            "the manual explains how to configure the {x} online .",
            "the {x} stores user data in an encrypted format .",
            "a virus infected the {x} and deleted the backups .",
            "the startup built its app on top of the {x} platform .",
        ]),
    "weather": dict(
        nouns=["rain", "snow", "thunder", "fog", "hail", "drizzle", "blizzard", "hurricane",
               "frost", "tornado", "sleet", "monsoon", "heatwave", "lightning", "typhoon",
               "drought", "mist", "storm", "gale", "cyclone"],
        templates=[
            "the forecast warned of {x} over the mountains tonight .",
            "the flights were cancelled because of heavy {x} .",
            "farmers worried that the {x} would ruin the harvest .",
            "the temperature dropped and the {x} lasted all night .",
            "meteorologists tracked the {x} moving toward the coast .",
            "schools closed when the {x} hit the city .",
            "the weather station measured the {x} at dawn .",
            "the sky turned dark before the {x} began .",
            "the {x} flooded the roads in the valley .",
            "the radio announced a {x} warning for the region .",
            "we stayed indoors while the {x} battered the windows .",
            "the {x} season brings clouds and strong winds .",
            "the satellite images showed the {x} over the ocean .",
            "the {x} caused power cuts across the county .",
            "after the {x} the air felt cold and damp .",
        ]),
}
# Chinese topics: nouns only. Their templates are real sentences (templates_from_sentences).
TOPICS_ZH = {
    "hotel": ["酒店", "房间", "前台", "早餐", "服务员", "宾馆", "卫生间", "大堂", "客房", "餐厅",
              "电梯", "浴室", "床单", "门童", "停车场", "总台", "自助餐", "游泳池", "床垫",
              "行李员"],
    "laptop": ["笔记本", "屏幕", "键盘", "电池", "硬盘", "内存", "显卡", "鼠标", "驱动", "光驱",
               "风扇", "接口", "摄像头", "触摸板", "散热器", "音箱", "主板", "显示器", "处理器",
               "充电器"],
    "book": ["作者", "小说", "故事", "文字", "读者", "书籍", "封面", "情节", "人物", "结局",
             "出版社", "书店", "插图", "杂志", "教材", "章节", "传记", "译者", "散文", "诗集"],
    "skincare": ["喷雾", "面膜", "精华", "乳液", "粉底", "面霜", "爽肤水", "唇膏", "眼霜",
                 "洗面奶", "化妆水", "香水", "防晒霜", "口红", "卸妆水", "护手霜", "精油",
                 "身体乳", "隔离霜", "沐浴露"],
}
TOPIC_SETS = {"default": ["sports", "food", "medicine", "music"],
              "alternate": ["vehicles", "plants", "computing", "weather"],
              "zh_reviews": ["hotel", "laptop", "book", "skincare"]}
ZH_TEMPLATES_PER_TOPIC = 40  # real sentences kept per topic (English topics have 15 templates)
ZH_MIN_TEMPLATES = 15  # fewer real sentences for a topic: the task is not built
ZH_SENTENCE_CHARS = (8, 40)  # length range of a usable sentence, in characters
TRAIN_NOUNS = 12  # per topic; the other 8 are the control rows' held-out nouns

# Frames that say nothing of the topic. The first ones are used in training rows, the rest only
# in test rows, so the test rows' sentences are new to the classifier.
NEUTRAL_FRAMES = [
    "have you ever heard of {x} ?",
    "my friend told me about {x} yesterday .",
    "there was a long article about {x} in the paper .",
    "i want to learn more about {x} .",
    "he asked me what i thought of {x} .",
    "everybody is talking about {x} these days .",
    "she wrote a short essay about {x} .",
    "can you tell me something about {x} ?",
    "the podcast this week is all about {x} .",
    "i searched the internet for {x} last night .",
    "my uncle has strong opinions about {x} .",
    "we argued about {x} for an hour .",
    "the library has a book about {x} .",
    "what do you know about {x} ?",
]
TRAIN_FRAMES = 7
NEUTRAL_FRAMES_ZH = [
    "你听说过{x}吗？",
    "我朋友昨天跟我提起了{x}。",
    "报纸上有一篇关于{x}的长文章。",
    "我想多了解一下{x}。",
    "他问我对{x}有什么看法。",
    "最近大家都在谈论{x}。",
    "她写了一篇关于{x}的短文。",
    "你能跟我讲讲{x}吗？",
    "这周的节目讲的全是{x}。",
    "我昨晚在网上搜了一下{x}。",
    "我叔叔对{x}很有意见。",
    "我们为{x}争论了一个小时。",
    "广播里又说到了{x}。",
    "关于{x}你知道些什么？",
]
# Characters of transliterated names (brands, places): the invented Chinese terms are three of
# them, so that no character says the topic.
_NAME_CHARS_ZH = ("阿艾安奥巴贝波布达德迪蒂多菲芙格哈赫吉卡凯柯克库拉莱兰朗勒雷里莉琳露伦罗洛"
                  "玛曼梅蒙米娜纳妮诺帕佩琪瑞萨塞莎斯索塔泰特提图瓦维沃西希夏雅伊尤泽扎珂")

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "gl", "kr", "pl", "st", "tr", "vr", "zh", "sk"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou", "ei"]
_CODAS = ["", "", "n", "r", "l", "x", "th", "sk", "nd", "m"]


def read_vocab(path):
  """The vocabulary's tokens (one per line), as a set."""
  with open(path, encoding="utf-8") as f:
    return set(line.strip() for line in f if line.strip())


def invented_terms(n, vocab, rng):
  """n distinct pronounceable pseudo-words of 3 syllables, none a whole word of `vocab`."""
  terms = set()
  while len(terms) < n:
    word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(3))
    word += rng.choice(_CODAS)
    if word not in vocab and not any(word in t or t in word for t in terms):
      terms.add(word)
  return sorted(terms)


def invented_names_zh(n, vocab, rng, known_text, known_words):
  """n distinct names of three _NAME_CHARS_ZH characters (each in `vocab`), none of them in
  `known_text` (the files the sentences come from, one string) or in `known_words` (a
  dictionary's words). ValueError when `vocab` lacks half the characters (not Chinese)."""
  chars = [c for c in _NAME_CHARS_ZH if c in vocab]
  if len(chars) < len(_NAME_CHARS_ZH) // 2:
    raise ValueError("--vocab_file holds %d of the %d name characters: expected a Chinese "
                     "vocabulary for --topic_set=zh_reviews" % (len(chars), len(_NAME_CHARS_ZH)))
  names = set()
  while len(names) < n:
    name = "".join(rng.sample(chars, 3))
    if name not in known_text and name not in known_words:
      names.add(name)
  return sorted(names)


def read_sentences(text):
  """The sentences of a text (a line is split after 。！？!?；;), stripped, of
  ZH_SENTENCE_CHARS characters and without braces; sorted, each once."""
  sentences = set()
  low, high = ZH_SENTENCE_CHARS
  for line in text.splitlines():
    for sentence in re.findall(r"[^。！？!?；;]+[。！？!?；;]?", line.strip()):
      sentence = sentence.strip()
      if low <= len(sentence) <= high and "{" not in sentence and "}" not in sentence:
        sentences.add(sentence)
  return sorted(sentences)


def templates_from_sentences(sentences, topics, rng, per_topic=ZH_TEMPLATES_PER_TOPIC):
  """Each topic's templates: sentences that name exactly one noun of TOPICS_ZH, once, that noun
  one of the topic's, replaced by {x}; up to `per_topic` of them, drawn by `rng`.

  Raises:
    ValueError: a topic has fewer than ZH_MIN_TEMPLATES such sentences.
  """
  nouns = [(topic, noun) for topic in topics for noun in TOPICS_ZH[topic]]
  found = {topic: [] for topic in topics}
  for sentence in sentences:
    hits = [(topic, noun) for topic, noun in nouns if noun in sentence]
    if len(hits) == 1 and sentence.count(hits[0][1]) == 1:
      found[hits[0][0]].append(sentence.replace(hits[0][1], "{x}"))
  for topic in topics:
    if len(found[topic]) < ZH_MIN_TEMPLATES:
      raise ValueError("--sentence_files: %d sentences name a %s noun (%s), %d are needed" % (
          len(found[topic]), topic, "/".join(TOPICS_ZH[topic][:3]), ZH_MIN_TEMPLATES))
  return {topic: rng.sample(found[topic], min(per_topic, len(found[topic]))) for topic in topics}


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def topic_specs(topic_set, vocab, rng, n_terms, sentence_files):
  """(specs, frames, terms) of a topic set: specs[topic] = dict(nouns, templates), the neutral
  frames, and n_terms invented terms the checkpoint's vocabulary does not hold as words."""
  topics = TOPIC_SETS[topic_set]
  if not topic_set.startswith("zh"):
    return ({t: TOPICS[t] for t in topics}, NEUTRAL_FRAMES, invented_terms(n_terms, vocab, rng))
  if not sentence_files:
    raise ValueError("--topic_set=%s needs --sentence_files (real sentences in Chinese)" %
                     topic_set)
  text = "\n".join(_read(path) for path in sentence_files)
  templates = templates_from_sentences(read_sentences(text), topics, rng)
  specs = {t: dict(nouns=TOPICS_ZH[t], templates=templates[t]) for t in topics}
  terms = invented_names_zh(n_terms, vocab, rng, text, word_freq.jieba_counts())
  return specs, NEUTRAL_FRAMES_ZH, terms


def build(output_dir, vocab_file, seed=1, topic_set="default", terms_per_topic=8,
          term_sentences=30, noun_sentences=6, train_rows_per_noun=8, doc_sentences=5,
          sentence_files=()):
  """Writes domain.txt, train.tsv, dev.tsv, test.tsv, test_groups.txt and task.json.

  Args:
    output_dir: where the task goes (created).
    vocab_file: the checkpoint's WordPiece vocabulary (terms must be none of its words).
    seed: draws the terms, the sentences and their order.
    topic_set: "default", "alternate" or "zh_reviews" (TOPIC_SETS).
    terms_per_topic: invented terms per topic.
    term_sentences: sentences of domain.txt that name each term.
    noun_sentences: sentences of domain.txt that name each ordinary noun.
    train_rows_per_noun: labeled training rows per training noun (topic templates and neutral
      frames, half each).
    doc_sentences: sentences per document of domain.txt.
    sentence_files: plain-text files of real sentences, for a Chinese topic set's templates.

  Returns:
    dict: the task's description (also written to task.json).
  """
  rng = random.Random(seed)
  vocab = read_vocab(vocab_file)
  topics = TOPIC_SETS[topic_set]
  specs, neutral_frames, terms = topic_specs(topic_set, vocab, rng,
                                             terms_per_topic * len(topics), sentence_files)
  rng.shuffle(terms)
  term_topic = {t: topics[i // terms_per_topic] for i, t in enumerate(terms)}
  os.makedirs(output_dir, exist_ok=True)

  # domain.txt: per topic, sentences naming its terms and its ordinary nouns, in documents.
  documents = []
  for topic in topics:
    spec = specs[topic]
    sentences = []
    for term in [t for t in terms if term_topic[t] == topic]:
      sentences += [rng.choice(spec["templates"]).format(x=term) for _ in range(term_sentences)]
    for noun in spec["nouns"]:
      sentences += [rng.choice(spec["templates"]).format(x=noun) for _ in range(noun_sentences)]
    rng.shuffle(sentences)
    documents += [sentences[i:i + doc_sentences] for i in range(0, len(sentences), doc_sentences)]
  rng.shuffle(documents)
  _write(output_dir, "domain.txt", "".join("\n".join(doc) + "\n\n" for doc in documents))

  # Labeled rows: ordinary training nouns in topic templates and in the training frames.
  train, dev = [], []
  for topic in topics:
    spec = specs[topic]
    for noun in spec["nouns"][:TRAIN_NOUNS]:
      for i in range(train_rows_per_noun + 2):
        if i % 2:
          text = rng.choice(neutral_frames[:TRAIN_FRAMES]).format(x=noun)
        else:
          text = rng.choice(spec["templates"]).format(x=noun)
        (dev if i >= train_rows_per_noun else train).append((text, topic))
  rng.shuffle(train)
  rng.shuffle(dev)
  _write(output_dir, "train.tsv", "".join("%s\t%s\n" % row for row in train))
  _write(output_dir, "dev.tsv", "".join("%s\t%s\n" % row for row in dev))

  # Test rows: held-out frames naming a term, or a held-out ordinary noun (the control).
  test = []
  frames = neutral_frames[TRAIN_FRAMES:]
  for term in terms:
    test += [(frame.format(x=term), term_topic[term], "term") for frame in frames]
  for topic in topics:
    for noun in specs[topic]["nouns"][TRAIN_NOUNS:]:
      test += [(frame.format(x=noun), topic, "control") for frame in frames]
  _write(output_dir, "test.tsv", "".join("%s\t%s\n" % row[:2] for row in test))
  _write(output_dir, "test_groups.txt", "".join("%s\n" % row[2] for row in test))

  task = {"seed": seed, "topic_set": topic_set, "topics": topics,
          "terms": {t: term_topic[t] for t in terms}, "term_sentences": term_sentences,
          "domain_sentences": sum(len(d) for d in documents), "domain_documents": len(documents),
          "train_rows": len(train), "dev_rows": len(dev),
          "test_rows": {"term": sum(r[2] == "term" for r in test),
                        "control": sum(r[2] == "control" for r in test)}}
  _write(output_dir, "task.json", json.dumps(task, indent=1, sort_keys=True) + "\n")
  return task


def _write(output_dir, name, text):
  path = os.path.join(output_dir, name)

  def write(tmp_path):
    with open(tmp_path, "w", encoding="utf-8") as f:
      f.write(text)

  atomic_files.write_atomically(path, write)


def score(task_dir, predictions):
  """Accuracy of predict.txt's labels on the term rows and on the control rows.

  Args:
    task_dir: a folder written by `build`.
    predictions: predict.txt of run_classifier_mgpu.py on task_dir/test.tsv (one label a line,
      in input order).

  Returns:
    dict: "term" and "control" accuracies, and their row counts.
  """
  with open(os.path.join(task_dir, "test.tsv"), encoding="utf-8") as f:
    labels = [line.rstrip("\n").split("\t")[1] for line in f]
  with open(os.path.join(task_dir, "test_groups.txt"), encoding="utf-8") as f:
    groups = [line.strip() for line in f]
  with open(predictions, encoding="utf-8") as f:
    predicted = [line.rstrip("\n").split("\t")[0] for line in f]
  if len(predicted) != len(labels):
    raise ValueError("%s has %d lines, but %s/test.tsv has %d rows" %
                     (predictions, len(predicted), task_dir, len(labels)))
  result = {}
  for group in ("term", "control"):
    rows = [i for i, g in enumerate(groups) if g == group]
    result[group] = sum(predicted[i] == labels[i] for i in rows) / float(len(rows))
    result[group + "_rows"] = len(rows)
  return result


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  b = sub.add_parser("build", help="write the task")
  b.add_argument("--output_dir", required=True)
  b.add_argument("--vocab_file", required=True)
  b.add_argument("--seed", type=int, default=1)
  b.add_argument("--topic_set", choices=sorted(TOPIC_SETS), default="default")
  b.add_argument("--terms_per_topic", type=int, default=8)
  b.add_argument("--term_sentences", type=int, default=30,
                 help="sentences of domain.txt naming each invented term")
  b.add_argument("--sentence_files", default="",
                 help="comma-separated plain-text files of real Chinese sentences, the "
                 "templates of --topic_set=zh_reviews (e.g. ChnSentiCorp's reviews)")
  s = sub.add_parser("score", help="term and control accuracy of a predict.txt")
  s.add_argument("--task_dir", required=True)
  s.add_argument("--predictions", required=True)
  args = parser.parse_args(argv)
  try:
    if args.command == "build":
      task = build(args.output_dir, args.vocab_file, args.seed, args.topic_set,
                   args.terms_per_topic, args.term_sentences,
                   sentence_files=[p for p in args.sentence_files.split(",") if p])
      print(json.dumps({k: v for k, v in task.items() if k != "terms"}, sort_keys=True))
    else:
      print(json.dumps(score(args.task_dir, args.predictions), sort_keys=True))
  except (OSError, ValueError) as e:  # a missing file, too few sentences, a short predict.txt
    sys.stderr.write("error: rare_terms.py: %s\n" % e)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
