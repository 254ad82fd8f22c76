"""The papers' corpora as data: languages, directions, vocabulary, sampling, and for every
language pair and split the sources (files of the public releases) it is read from.

========================  =====================================================================
``opus100``               OPUS-100 v1.0 (Zhang et al. 2020): CLSR Sec. 5.1/Table 1, adaptive-
                          sparse Table 2 (94 O2M + 94 M2O test pairs, 30 zero-shot directions)
``wmt14``                 the 13 WMT pairs of the CLSR paper's Table 3 (App. A)
``ted8-related``/         TED-8 of Wang et al. (2020) from the TED talks of Qi et al. (2018):
``ted8-diverse``          latent-depth paper Sec. 5 / App. C.1 Table 12
``public24``              Public-24 (Liu et al. 2020): adaptive-sparse App. B Table 4
``lsl10``                 the LSL paper's 10 languages (Sec. 4, App. B Table 7), Flores-101
                          dev/devtest as valid/test
========================  =====================================================================

Every path is relative to a mirror root; see docs/recipes.md for the layouts.
"""

import itertools
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from .sources import Resource, Source

OPUS = "https://object.pouta.csc.fi"
STATMT = "https://www.statmt.org"
DATA_STATMT = "https://data.statmt.org"
WIT3 = "https://raw.githubusercontent.com/hlt-mt/WIT3/master/archive"


@dataclass
class Layout:
    """What one build reads: ``stored`` {a-b: {split: [Source]}} (one orientation per language
    pair, as fairseq reads the reverse direction from it), trained ``lang_pairs`` and test-only
    ``zero_shot_pairs`` (directions)."""

    stored: Dict[str, Dict[str, List[Source]]]
    lang_pairs: List[str]
    zero_shot_pairs: List[str] = field(default_factory=list)


@dataclass
class CorpusSpec:
    name: str
    title: str
    reproduces: str
    pivot: Optional[str]
    languages: Tuple[str, ...]          # the corpus inventory without the pivot
    directions: Dict[str, str]          # name -> what it trains; the first is the default
    vocab_size: int
    vocab_source: str
    spm_sampling: Dict[str, float]      # {"temperature": T, "total": N} or {"per_language": k}
    train_sampling: Dict[str, str]      # training-time sampling flags the paper uses
    resources: Dict[str, Resource]
    layout: Callable[["CorpusSpec", List[str], str], Layout]
    lq_downsample: Optional[Dict[str, float]] = None  # LSL: {"temperature": 5, "max_factor": 10}
    notes: Tuple[str, ...] = ()


def _r(*resources):
    return {r.name: r for r in resources}


def _pair(a, b):
    return f"{a}-{b}"


def english_centric(per_language, zero_shot=None):
    """Layout builder for an English-centric corpus: ``per_language(spec, xx)`` gives
    {split: [Source]} of en-xx; ``zero_shot(spec, langs)`` gives test-only {a-b: {split: [...]}}."""

    def layout(spec, langs, direction):
        p = spec.pivot
        stored = {_pair(p, x): per_language(spec, x) for x in langs}
        o2m, m2o = [_pair(p, x) for x in langs], [_pair(x, p) for x in langs]
        pairs = {"o2m": o2m, "m2o": m2o, "both": o2m + m2o}[direction]
        zs = zero_shot(spec, langs) if zero_shot else {}
        stored.update(zs)
        zs_dirs = [d for pair in zs for d in (pair, "-".join(pair.split("-")[::-1]))]
        return Layout(stored, pairs, zs_dirs)

    return layout


ENGLISH_CENTRIC = {"both": "en->xx and xx->en in one corpus (the recipes train O2M and M2O on "
                           "its two halves, or M2M on both)",
                   "o2m": "en->xx only", "m2o": "xx->en only"}
T5 = {"original": "--sampling-method concat",
      "oversample": "--sampling-method temperature --sampling-temperature 5"}
SPM_T5 = {"temperature": 5, "total": 4_000_000}


# ============================================================================ OPUS-100

OPUS100_LANGS = tuple("""af am an ar as az be bg bn br bs ca cs cy da de dz el eo es et eu fa fi
fr fy ga gd gl gu ha he hi hr hu hy id ig is it ja ka kk km kn ko ku ky li lt lv mg mk ml mn mr ms
mt my nb ne nl nn no oc or pa pl ps pt ro ru rw se sh si sk sl sq sr sv ta te tg th tk tr tt ug uk
ur uz vi wa xh yi yo zh zu""".split())
OPUS100_NO_DEVTEST = ("an", "dz", "hy", "mn", "yo")  # 99 - 5 = the 94 dev/test pairs
OPUS100_ZERO_SHOT = ("ar", "de", "fr", "nl", "ru", "zh")  # 15 pairs = 30 zero-shot directions
OPUS100_ROOT = "opus-100-corpus/v1.0"
OPUS100_SPLITS = {"train": "train", "valid": "dev", "test": "test"}


def _opus100_files(kind, a, b, split):
    d = f"{OPUS100_ROOT}/{kind}/{a}-{b}"
    return (f"{d}/opus.{a}-{b}-{split}.{a}", f"{d}/opus.{a}-{b}-{split}.{b}")


def _opus100_language(spec, x):
    a, b = sorted(("en", x))
    splits = ("train",) if x in OPUS100_NO_DEVTEST else ("train", "valid", "test")
    return {s: [Source("opus-100", (a, b), _opus100_files("supervised", a, b, OPUS100_SPLITS[s]),
                       "opus100")] for s in splits}


def _opus100_zero_shot(spec, langs):
    zs = sorted(x for x in langs if x in OPUS100_ZERO_SHOT)
    return {_pair(a, b): {"test": [Source("opus-100", (a, b),
                                          _opus100_files("zero-shot", a, b, "test"), "opus100")]}
            for a, b in itertools.combinations(zs, 2)}


OPUS100 = CorpusSpec(
    name="opus100", title="OPUS-100 v1.0 (Zhang et al., 2020)",
    reproduces="CLSR paper Sec. 5.1, Table 1 (O2M and M2O, original and T=5 oversampled); "
               "adaptive-sparse paper Table 2 (M2M, 94+94 directions, 30 zero-shot)",
    pivot="en", languages=OPUS100_LANGS, directions=ENGLISH_CENTRIC, vocab_size=64000,
    vocab_source="CLSR Sec. 5 ('vocabulary size of 64K'); adaptive-sparse App. C ('OPUS has 64k')",
    spm_sampling=SPM_T5, train_sampling=T5,
    resources=_r(Resource("opus100", f"{OPUS}/OPUS-100/v1.0/opus-100-corpus-v1.0.tar.gz")),
    layout=english_centric(_opus100_language, _opus100_zero_shot),
    notes=("an, dz, hy, mn, yo have no dev/test data (trained, not evaluated), as in the release",
           "zero-shot test sets (2000 pairs each) between ar, de, fr, nl, ru, zh; no dev"))


# ============================================================================ WMT resources


def _sacrebleu(name):
    return Resource(f"sacrebleu:{name}", sacrebleu=name, dest="sacrebleu")


def sacrebleu_source(name, langpair):
    """A sacreBLEU test set as cached by sacreBLEU: sacrebleu/<name>/<name_>.<lp>.{src,ref}."""
    a, b = langpair.split("-")
    stem = f"sacrebleu/{name}/{name.replace('/', '_')}.{langpair}"
    return Source(name, (a, b), (f"{stem}.src", f"{stem}.ref"), f"sacrebleu:{name}")


def _text(name, res, a, b, fa, fb, **kw):
    return Source(name, (a, b), (fa, fb), res, **kw)


def _moses(corpus, version, a, b, optional=False, quality="hq"):
    """An OPUS corpus in Moses format: <Corpus>.<a>-<b>.<lang> in opus/<Corpus>/<version>/."""
    a, b = sorted((a, b))
    d = f"opus/{corpus}/{version}"
    res = Resource(f"opus-{corpus}-{version}-{a}-{b}",
                   f"{OPUS}/OPUS-{corpus}/{version}/moses/{a}-{b}.txt.zip", dest=d,
                   filename=f"OPUS-{corpus}-{version}-{a}-{b}.txt.zip")
    src = Source(corpus, (a, b), (f"{d}/{corpus}.{a}-{b}.{a}", f"{d}/{corpus}.{a}-{b}.{b}"),
                 res.name, optional=optional, quality=quality)
    return res, src


def _wmt_archive(name, url, dest):
    return Resource(name, url, dest=f"wmt/{dest}", filename=f"{name}.{url.rsplit('.', 1)[-1]}")


WMT_ARCHIVES = _r(
    _wmt_archive("europarl-v7", f"{STATMT}/wmt13/training-parallel-europarl-v7.tgz", "europarl-v7"),
    _wmt_archive("commoncrawl", f"{STATMT}/wmt13/training-parallel-commoncrawl.tgz", "commoncrawl"),
    _wmt_archive("un-2000", f"{STATMT}/wmt13/training-parallel-un.tgz", "un-2000"),
    _wmt_archive("nc-v8", f"{STATMT}/wmt13/training-parallel-nc-v8.tgz", "nc-v8"),
    _wmt_archive("nc-v9", f"{STATMT}/wmt14/training-parallel-nc-v9.tgz", "nc-v9"),
    _wmt_archive("nc-v10", f"{STATMT}/wmt15/training-parallel-nc-v10.tgz", "nc-v10"),
    _wmt_archive("nc-v12", f"{DATA_STATMT}/wmt17/translation-task/training-parallel-nc-v12.tgz",
                 "nc-v12"),
    _wmt_archive("giga-fren", f"{STATMT}/wmt10/training-giga-fren.tar", "giga-fren"),
    _wmt_archive("wmt16-ep-v8", f"{DATA_STATMT}/wmt16/translation-task/training-parallel-ep-v8.tgz",
                 "wmt16-ep-v8"),
    _wmt_archive("wmt17-ep-v8", f"{DATA_STATMT}/wmt17/translation-task/training-parallel-ep-v8.tgz",
                 "wmt17-ep-v8"),
    _wmt_archive("wmt18-ep-v8", f"{DATA_STATMT}/wmt18/translation-task/training-parallel-ep-v8.tgz",
                 "wmt18-ep-v8"),
    _wmt_archive("rapid2016", f"{DATA_STATMT}/wmt17/translation-task/rapid2016.tgz", "rapid2016"),
    _wmt_archive("leta-v1", f"{DATA_STATMT}/wmt17/translation-task/leta.v1.tgz", "leta-v1"),
    _wmt_archive("dcep-lv", f"{DATA_STATMT}/wmt17/translation-task/dcep.lv-en.v1.tgz", "dcep-lv"),
    _wmt_archive("books-lv", f"{DATA_STATMT}/wmt17/translation-task/books.lv-en.v1.tgz", "books-lv"),
    _wmt_archive("paracrawl-r1-et", "https://s3.amazonaws.com/web-language-models/paracrawl/"
                 "release1/paracrawl-release1.en-et.zipporah0-dedup-clean.tgz", "paracrawl-release1"),
    _wmt_archive("wmt14-dev", f"{STATMT}/wmt14/dev.tgz", "wmt14-dev"),
    Resource("czeng17", dest="manual/czeng17", manual="CzEng 1.7, registration at "
             "https://ufal.mff.cuni.cz/czeng/czeng17; export the plain-text pairs as "
             "czeng17.cs-en.cs / czeng17.cs-en.en"),
    Resource("yandex-1m", dest="manual/yandex", manual="Yandex 1M corpus, registration at "
             "https://translate.yandex.ru/corpus; files corpus.en_ru.1m.en / corpus.en_ru.1m.ru"),
    Resource("un-v1", dest="manual/UNv1.0", manual="United Nations Parallel Corpus v1.0, "
             "https://conferences.unite.un.org/UNCorpus (multi-part archives); files "
             "en-ru/UNv1.0.en-ru.{en,ru}, en-zh/UNv1.0.en-zh.{en,zh}"),
    Resource("cwmt", dest="manual/cwmt", manual="CWMT corpora (casia2015, casict2011, casict2015, "
             "datum2015, datum2017, neu2017), partly registration-only, "
             "http://nlp.nju.edu.cn/cwmt-wmt; concatenated as cwmt.zh-en.zh / cwmt.zh-en.en"),
)


def _tsv_gz(name, url, dest, langs, columns=(0, 1)):
    res = Resource(name, url, dest=f"wmt/{dest}", unpack=False)
    return res, Source(name, langs, (f"wmt/{dest}/{res.file}",), name, "tsv", columns)


def europarl_v9(x):
    return _tsv_gz(f"europarl-v9-{x}", f"{STATMT}/europarl/v9/training/europarl-v9.{x}-en.tsv.gz",
                   "europarl-v9", (x, "en"))


def paracrawl_r3(x):
    res = Resource(f"paracrawl-r3-{x}", "https://s3.amazonaws.com/web-language-models/paracrawl/"
                   f"release3/en-{x}.bicleaner07.tmx.gz", dest="wmt/paracrawl-release3", unpack=False)
    return res, Source(res.name, ("en", x), (f"wmt/paracrawl-release3/{res.file}",), res.name, "tmx")


def nc_v14(a, b):
    return _tsv_gz(f"nc-v14-{a}-{b}", f"{DATA_STATMT}/news-commentary/v14/training/"
                   f"news-commentary-v14.{a}-{b}.tsv.gz", "news-commentary-v14", (a, b))


def wikititles_v1(x):
    return _tsv_gz(f"wikititles-v1-{x}", f"{DATA_STATMT}/wikititles/v1/wikititles-v1.{x}-en.tsv.gz",
                   "wikititles-v1", (x, "en"))


def _archive_text(name, x, pattern, **kw):
    """Two files of an unpacked WMT archive: ``pattern`` with {lang} (and {x})."""
    d = WMT_ARCHIVES[name].dest
    return Source(name, (x, "en"), (f"{d}/{pattern.format(x=x, lang=x)}",
                                    f"{d}/{pattern.format(x=x, lang='en')}"), name, **kw)


def _manual(name, a, b, fa, fb):
    d = WMT_ARCHIVES[name].dest
    return Source(name, (a, b), (f"{d}/{fa}", f"{d}/{fb}"), name, optional=True)


def wmt_train(x, year):
    """(resources, sources) of the training data of en-x in the WMT year's news task."""
    res, src = [], []

    def add(pair):
        res.append(pair[0])
        src.append(pair[1])

    ep7 = lambda: src.append(_archive_text("europarl-v7", x, "training/europarl-v7.{x}-en.{lang}"))
    cc = lambda: src.append(_archive_text("commoncrawl", x, "commoncrawl.{x}-en.{lang}"))
    un = lambda: src.append(_archive_text("un-2000", x, "un/undoc.2000.{x}-en.{lang}"))
    rapid = lambda: src.append(_archive_text("rapid2016", x, "rapid2016.{x}-en.{lang}"))
    ep8 = lambda y: src.append(_archive_text(f"wmt{y}-ep-v8", x, "training/europarl-v8.{x}-en.{lang}"))
    table = {
        ("cs", 19): lambda: (add(europarl_v9("cs")), add(paracrawl_r3("cs")), cc(),
                             add(nc_v14("cs", "en")),
                             src.append(_manual("czeng17", "cs", "en", "czeng17.cs-en.cs",
                                                "czeng17.cs-en.en"))),
        ("fr", 15): lambda: (ep7(), cc(), un(), src.append(_archive_text(
            "nc-v10", x, "news-commentary-v10.{x}-en.{lang}")), src.append(Source(
                "giga-fren", ("fr", "en"), ("wmt/giga-fren/giga-fren.release2.fixed.fr.gz",
                                            "wmt/giga-fren/giga-fren.release2.fixed.en.gz"),
                "giga-fren"))),
        ("fr", 14): lambda: (ep7(), cc(), un(), src.append(_archive_text(
            "nc-v9", x, "training/news-commentary-v9.{x}-en.{lang}")), src.append(Source(
                "giga-fren", ("fr", "en"), ("wmt/giga-fren/giga-fren.release2.fixed.fr.gz",
                                            "wmt/giga-fren/giga-fren.release2.fixed.en.gz"),
                "giga-fren"))),
        ("ru", 19): lambda: (cc(), add(nc_v14("en", "ru")), add(wikititles_v1("ru")),
                             src.append(_manual("un-v1", "en", "ru", "en-ru/UNv1.0.en-ru.en",
                                                "en-ru/UNv1.0.en-ru.ru")),
                             src.append(_manual("yandex-1m", "en", "ru", "corpus.en_ru.1m.en",
                                                "corpus.en_ru.1m.ru"))),
        ("zh", 19): lambda: (add(nc_v14("en", "zh")), add(wikititles_v1("zh")),
                             src.append(_manual("un-v1", "en", "zh", "en-zh/UNv1.0.en-zh.en",
                                                "en-zh/UNv1.0.en-zh.zh")),
                             src.append(_manual("cwmt", "zh", "en", "cwmt.zh-en.zh",
                                                "cwmt.zh-en.en"))),
        ("zh", 17): lambda: (src.append(_archive_text(
            "nc-v12", x, "training/news-commentary-v12.{x}-en.{lang}")),
            src.append(_manual("un-v1", "en", "zh", "en-zh/UNv1.0.en-zh.en",
                               "en-zh/UNv1.0.en-zh.zh")),
            src.append(_manual("cwmt", "zh", "en", "cwmt.zh-en.zh", "cwmt.zh-en.en"))),
        ("es", 13): lambda: (ep7(), cc(), un(), src.append(_archive_text(
            "nc-v8", x, "training/news-commentary-v8.{x}-en.{lang}"))),
        ("fi", 19): lambda: (add(europarl_v9("fi")), add(paracrawl_r3("fi")),
                             add(wikititles_v1("fi")), rapid()),
        ("fi", 17): lambda: (ep8(17), rapid()),
        ("de", 14): lambda: (ep7(), cc(), src.append(_archive_text(
            "nc-v9", x, "training/news-commentary-v9.{x}-en.{lang}"))),
        ("de", 19): lambda: (add(europarl_v9("de")), add(paracrawl_r3("de")), cc(),
                             add(nc_v14("de", "en")), add(wikititles_v1("de"))),
        ("et", 18): lambda: (ep8(18), rapid(), src.append(Source(
            "paracrawl-r1-et", ("en", "et"), tuple(
                f"wmt/paracrawl-release1/paracrawl-release1.en-et.zipporah0-dedup-clean.{lang}"
                for lang in ("en", "et")), "paracrawl-r1-et"))),
        ("lv", 17): lambda: (ep8(17), rapid(),
                             src.append(_text("leta-v1", "leta-v1", "lv", "en",
                                              "wmt/leta-v1/LETA-lv-en/leta.lv",
                                              "wmt/leta-v1/LETA-lv-en/leta.en")),
                             src.append(_text("dcep-lv", "dcep-lv", "lv", "en",
                                              "wmt/dcep-lv/dcep.en-lv/dcep.lv",
                                              "wmt/dcep-lv/dcep.en-lv/dcep.en")),
                             src.append(_text("books-lv", "books-lv", "lv", "en",
                                              "wmt/books-lv/farewell/books.lv",
                                              "wmt/books-lv/farewell/books.en"))),
        ("lt", 19): lambda: (add(europarl_v9("lt")), add(paracrawl_r3("lt")),
                             add(wikititles_v1("lt"))),
        ("ro", 16): lambda: (ep8(16), add(_moses("SETIMES", "v2", "en", "ro"))),
        ("hi", 14): lambda: add(_tsv_gz("hindencorp05", "https://lindat.mff.cuni.cz/repository/"
                                        "xmlui/bitstream/handle/11858/00-097C-0000-0023-625F-0/"
                                        "hindencorp05.plaintext.gz", "hindencorp", ("en", "hi"),
                                        (3, 4))),
        ("tr", 18): lambda: add(_moses("SETIMES", "v2", "en", "tr")),
        ("tr", 17): lambda: add(_moses("SETIMES", "v2", "en", "tr")),
        ("gu", 19): lambda: add(wikititles_v1("gu")),
        ("kk", 19): lambda: (add(wikititles_v1("kk")), add(nc_v14("en", "kk"))),
    }
    table[(x, year)]()
    for s in src:
        if s.resource in WMT_ARCHIVES:
            res.append(WMT_ARCHIVES[s.resource])
    return res, src


def heldout(name, langpair):
    """(resource, source) of a dev/test set: a sacreBLEU set name or a WMT14 dev text file."""
    if name == "newsdev2014":
        x = langpair.split("-")[0]
        return WMT_ARCHIVES["wmt14-dev"], _archive_text("wmt14-dev", x, "dev/newsdev2014.{lang}")
    return _sacrebleu(name), sacrebleu_source(name, langpair)


# ============================================================================ WMT-14 (CLSR)

# language: (train year, dev set, test set) of CLSR Table 3; sacreBLEU sets, xx-en orientation
# (the paper's test counts, e.g. En-Ru 2000 / En-Lt 1000, are those of the xx-en WMT19 sets)
WMT14_TABLE3 = {
    "cs": (19, ("wmt17", "cs-en"), ("wmt18", "cs-en")),
    "fr": (15, ("wmt13", "fr-en"), ("wmt14/full", "fr-en")),
    "ru": (19, ("wmt18", "ru-en"), ("wmt19", "ru-en")),
    "zh": (19, ("wmt18", "zh-en"), ("wmt19", "zh-en")),
    "es": (13, ("wmt12", "es-en"), ("wmt13", "es-en")),
    "fi": (19, ("wmt18", "fi-en"), ("wmt19", "fi-en")),
    "de": (14, ("wmt13", "de-en"), ("wmt14/full", "de-en")),
    "et": (18, ("wmt18/dev", "et-en"), ("wmt18", "et-en")),
    "lv": (17, ("wmt17/dev", "lv-en"), ("wmt17", "lv-en")),
    "lt": (19, ("wmt19/dev", "lt-en"), ("wmt19", "lt-en")),
    "ro": (16, ("wmt16/dev", "ro-en"), ("wmt16", "ro-en")),
    "hi": (14, ("newsdev2014", "hi-en"), ("wmt14/full", "hi-en")),
    "tr": (18, ("wmt17", "tr-en"), ("wmt18", "tr-en")),
}


def _wmt_language(table):
    def per_language(spec, x):
        year, dev, test = table[x]
        _, train = wmt_train(x, year)
        return {"train": train, "valid": [heldout(*dev)[1]], "test": [heldout(*test)[1]]}
    return per_language


def _wmt_resources(table):
    res = {}
    for x, (year, dev, test) in table.items():
        for r in wmt_train(x, year)[0] + [heldout(*dev)[0], heldout(*test)[0]]:
            res[r.name] = r
    return res


WMT14 = CorpusSpec(
    name="wmt14", title="WMT-14: 13 English-centric WMT pairs (CLSR App. A, Table 3)",
    reproduces="CLSR paper Sec. 5.2, Table 2 (O2M and M2O, original and T=5 oversampled)",
    pivot="en", languages=tuple(WMT14_TABLE3), directions=ENGLISH_CENTRIC, vocab_size=64000,
    vocab_source="CLSR Sec. 5 (one 64K SentencePiece vocabulary for both benchmarks)",
    spm_sampling=SPM_T5, train_sampling=T5, resources=_wmt_resources(WMT14_TABLE3),
    layout=english_centric(_wmt_language(WMT14_TABLE3)),
    notes=("training corpora per pair are those of the WMT news task of the year in Table 3; "
           "registration-only parts (CzEng 1.7, Yandex 1M, UN v1.0, CWMT) are optional: used when "
           "present in the mirror under manual/, reported as missing otherwise (En-Cs, En-Ru and "
           "En-Zh are then far smaller than Table 3's counts)",
           "dev/test are sacreBLEU's copies of the official sets (md5-checked), xx-en orientation"))


# ============================================================================ TED-8

TED_COLUMNS = {"aze": "az", "bel": "be", "glg": "gl", "slk": "sk", "tur": "tr", "rus": "ru",
               "por": "pt-br", "ces": "cs", "bos": "bs", "mar": "mr", "hin": "hi", "mkd": "mk",
               "ell": "el", "bul": "bg", "fra": "fr", "kor": "ko", "eng": "en"}
TED_SPLITS = {"train": "train", "valid": "dev", "test": "test"}


def _ted_language(spec, x):
    return {s: [Source("ted-talks", ("eng", x), (f"ted_talks/all_talks_{f}.tsv",), "ted-talks",
                       "ted", ("en", TED_COLUMNS[x]))] for s, f in TED_SPLITS.items()}


def _ted(variant, langs, table_order):
    return CorpusSpec(
        name=f"ted8-{variant}", title=f"TED-8 {variant} (Wang et al., 2020; TED talks of Qi et "
                                      "al., 2018)",
        reproduces=f"latent-depth paper Sec. 5 (Tables 3-7, 9, 10; data App. C.1 Table 12, "
                   f"{variant}: {table_order})",
        pivot="eng", languages=langs, directions=ENGLISH_CENTRIC, vocab_size=32000,
        vocab_source="paper silent; its data (Wang et al. 2020) uses 8K SentencePiece per "
                     "language with a combined dictionary; one joint 32K model here",
        spm_sampling=SPM_T5,
        train_sampling={"original": "--sampling-method concat"},
        resources=_r(Resource("ted-talks", "http://phontron.com/data/ted_talks.tar.gz",
                              dest="ted_talks")),
        layout=english_centric(_ted_language),
        notes=("ISO 639-3 codes as in the paper; por is the pt-br column (Table 12's ~185-195K "
               "training pairs; the pt column has ~50K)",
               "the TED tables are tokenized (Qi et al.); raw/ keeps them as released",
               "__NULL__ cells (talk not translated) are skipped"))


TED8_RELATED = _ted("related", ("aze", "bel", "glg", "slk", "tur", "rus", "por", "ces"),
                    "aze bel glg slk (low) tur rus por ces (high)")
TED8_DIVERSE = _ted("diverse", ("bos", "mar", "hin", "mkd", "ell", "bul", "fra", "kor"),
                    "bos mar hin mkd (low) ell bul fra kor (high)")


# ============================================================================ Public-24

def _iwslt17(x, multilingual):
    if multilingual:
        url = f"{WIT3}/2017-01-trnmted/texts/DeEnItNlRo/DeEnItNlRo/DeEnItNlRo-DeEnItNlRo.tgz"
        name, d = "iwslt17-DeEnItNlRo", "iwslt17/DeEnItNlRo-DeEnItNlRo"
    else:
        url, name, d = f"{WIT3}/2017-01-trnted/texts/en/{x}/en-{x}.tgz", f"iwslt17-en-{x}", \
            f"iwslt17/en-{x}"
    res = Resource(name, url, dest="iwslt17", filename=f"{name}.tgz")
    train = Source("iwslt17", ("en", x), tuple(f"{d}/train.tags.en-{x}.{lang}" for lang in ("en", x)),
                   name, "iwslt-tags")

    def xml(split):
        return Source("iwslt17", ("en", x), tuple(
            f"{d}/IWSLT17.TED.{split}.en-{x}.{lang}.xml" for lang in ("en", x)), name, "iwslt-xml")

    return res, train, xml


def _public24_language(spec, x):
    return PUBLIC24_SOURCES[x]


def _public24():
    sources, res = {}, {}

    def keep(*rs):
        for r in rs:
            res[r.name] = r

    wmt = {"gu": (19, ("wmt19/dev", "gu-en"), ("wmt19", "gu-en")),
           "kk": (19, ("wmt19/dev", "kk-en"), ("wmt19", "kk-en")),
           "tr": (17, ("wmt16", "tr-en"), ("wmt17", "tr-en")),
           "ro": (16, ("wmt16/dev", "ro-en"), ("wmt16", "ro-en")),
           "et": (18, ("wmt18/dev", "et-en"), ("wmt18", "et-en")),
           "lt": (19, ("wmt19/dev", "lt-en"), ("wmt19", "lt-en")),
           "fi": (17, ("wmt16", "fi-en"), ("wmt17", "fi-en")),
           "lv": (17, ("wmt17/dev", "lv-en"), ("wmt17", "lv-en")),
           "cs": (19, ("wmt18", "cs-en"), ("wmt19", "en-cs")),
           "es": (13, ("wmt12", "es-en"), ("wmt13", "es-en")),
           "zh": (17, ("wmt17/dev", "zh-en"), ("wmt17", "zh-en")),
           "de": (19, ("wmt18", "de-en"), ("wmt19", "de-en")),
           "ru": (19, ("wmt18", "ru-en"), ("wmt19", "ru-en")),
           "fr": (14, ("wmt13", "fr-en"), ("wmt14/full", "fr-en"))}
    for x, (year, dev, test) in wmt.items():
        train_res, train = wmt_train(x, year)
        (dr, ds), (tr, ts) = heldout(*dev), heldout(*test)
        keep(*train_res, dr, tr)
        sources[x] = {"train": train, "valid": [ds], "test": [ts]}
    for x in ("ja", "ko", "ar"):
        r, train, xml = _iwslt17(x, multilingual=False)
        tr, ts = heldout("iwslt17", f"en-{x}")
        keep(r, tr)
        sources[x] = {"train": [train], "valid": [xml("dev2010")], "test": [ts]}
    for x in ("nl", "it"):
        r, train, xml = _iwslt17(x, multilingual=True)
        keep(r)
        sources[x] = {"train": [train], "valid": [xml("dev2010")], "test": [xml("tst2010")]}
    stanford = "https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi"
    for stem in ("train", "tst2012", "tst2013"):
        for lang in ("en", "vi"):
            keep(Resource(f"iwslt15-{stem}.{lang}", f"{stanford}/{stem}.{lang}",
                          dest="iwslt15.en-vi", filename=f"{stem}.{lang}", unpack=False))
    vi = {s: [_text("iwslt15", f"iwslt15-{stem}.en", "en", "vi", f"iwslt15.en-vi/{stem}.en",
                    f"iwslt15.en-vi/{stem}.vi")]
          for s, stem in (("train", "train"), ("valid", "tst2012"), ("test", "tst2013"))}
    sources["vi"] = vi
    keep(Resource("wat2019-my-en", "http://lotus.kuee.kyoto-u.ac.jp/WAT/my-en-data/"
                  "wat2019.my-en.zip", dest=""))
    alt = lambda s: _text("wat2019-alt", "wat2019-my-en", "my", "en", f"wat2019.my-en/alt/{s}.alt.my",
                          f"wat2019.my-en/alt/{s}.alt.en")
    sources["my"] = {"train": [alt("train"), _text("wat2019-ucsy", "wat2019-my-en", "my", "en",
                                                   "wat2019.my-en/ucsy/train.ucsy.my",
                                                   "wat2019.my-en/ucsy/train.ucsy.en")],
                     "valid": [alt("dev")], "test": [alt("test")]}
    keep(Resource("floresv1-test-sets", "https://github.com/facebookresearch/flores/raw/main/"
                  "previous_releases/floresv1/data/wikipedia_en_ne_si_test_sets.tgz", dest="floresv1"))
    flores_v1 = {"ne": [("GNOME", "v1"), ("KDE4", "v2"), ("Ubuntu", "v14.10"),
                        ("GlobalVoices", "v2018q4")],
                 "si": [("GNOME", "v1"), ("KDE4", "v2"), ("Ubuntu", "v14.10"),
                        ("OpenSubtitles", "v2018")]}
    for x, corpora in flores_v1.items():
        train = []
        for corpus, version in corpora:
            r, s = _moses(corpus, version, "en", x)
            keep(r)
            train.append(s)
        d = "floresv1/wikipedia_en_ne_si_test_sets"
        fl = lambda split: _text("floresv1", "floresv1-test-sets", x, "en",
                                 f"{d}/wikipedia.{split}.{x}-en.{x}", f"{d}/wikipedia.{split}.{x}-en.en")
        sources[x] = {"train": train, "valid": [fl("dev")], "test": [fl("devtest")]}
    keep(Resource("iitb-parallel", "http://www.cfilt.iitb.ac.in/iitb_parallel/iitb_corpus_download/"
                  "parallel.tgz", dest="iitb", filename="iitb-parallel.tgz"),
         Resource("iitb-dev-test", "http://www.cfilt.iitb.ac.in/iitb_parallel/iitb_corpus_download/"
                  "dev_test.tgz", dest="iitb", filename="iitb-dev_test.tgz"))
    sources["hi"] = {"train": [_text("iitb", "iitb-parallel", "en", "hi", "iitb/parallel/IITB.en-hi.en",
                                     "iitb/parallel/IITB.en-hi.hi")],
                     "valid": [_text("iitb", "iitb-dev-test", "en", "hi", "iitb/dev_test/dev.en",
                                     "iitb/dev_test/dev.hi")],
                     "test": [_text("iitb", "iitb-dev-test", "en", "hi", "iitb/dev_test/test.en",
                                    "iitb/dev_test/test.hi")]}
    return sources, res


PUBLIC24_SOURCES, _PUBLIC24_RESOURCES = _public24()
PUBLIC24_ORDER = tuple("gu kk vi tr ja ko nl ar it my ne ro si hi et lt fi lv cs es zh de ru "
                       "fr".split())  # Table 4, smallest first

PUBLIC24 = CorpusSpec(
    name="public24", title="Public-24 (Liu et al., 2020): English and 24 languages",
    reproduces="adaptive-sparse paper Table 1, 3, 5 (O2M and M2O, 24 directions each); data "
               "App. B Table 4",
    pivot="en", languages=PUBLIC24_ORDER, directions=ENGLISH_CENTRIC, vocab_size=250000,
    vocab_source="adaptive-sparse App. C ('Public-24 dataset has 250k tokens')",
    spm_sampling=SPM_T5,
    train_sampling={"paper": "--sampling-method temperature --sampling-temperature 5"},
    resources=_PUBLIC24_RESOURCES, layout=english_centric(_public24_language),
    notes=("sources per language as in Table 4 (WMT year, IWSLT15/17, WAT19, FLoRes v1, IITB)",
           "IWSLT17 nl/it (multilingual task) are tested on tst2010 of the training release "
           "(tst2017 of that task is not in sacreBLEU); ja/ko/ar on sacreBLEU's iwslt17",
           "ne/si training data: the OPUS corpora the FLoRes v1 scripts use that are public "
           "without registration (GNOME, KDE4, Ubuntu, GlobalVoices, OpenSubtitles)"))


# ============================================================================ LSL-10

LSL_LANGS = ("de", "en", "es", "fr", "it", "ja", "ko", "pt", "sw", "zh")
FLORES101_CODES = {"de": "deu", "en": "eng", "es": "spa", "fr": "fra", "it": "ita", "ja": "jpn",
                   "ko": "kor", "pt": "por", "sw": "swh", "zh": "zho_simpl"}
LSL_GROUPS = {"de": "european", "en": "european", "es": "european", "fr": "european",
              "it": "european", "pt": "european", "ja": "cjk", "ko": "cjk", "zh": "cjk",
              "sw": "swahili"}  # LSL paper footnote 8 / App. F
WMT21_OPTIONAL = {  # WMT21 news-task releases of pairs within the 10 languages (optional)
    ("de", "en"): [("europarl-v10", f"{STATMT}/europarl/v10/training/europarl-v10.de-en.tsv.gz"),
                   ("nc-v16", f"{DATA_STATMT}/news-commentary/v16/training/"
                              "news-commentary-v16.de-en.tsv.gz"),
                   ("wikititles-v3", f"{DATA_STATMT}/wikititles/v3/wikititles-v3.de-en.tsv")],
    ("en", "ja"): [("nc-v16", f"{DATA_STATMT}/news-commentary/v16/training/"
                              "news-commentary-v16.en-ja.tsv.gz")],
    ("ja", "en"): [("wikititles-v3", f"{DATA_STATMT}/wikititles/v3/wikititles-v3.ja-en.tsv")],
    ("en", "zh"): [("nc-v16", f"{DATA_STATMT}/news-commentary/v16/training/"
                              "news-commentary-v16.en-zh.tsv.gz")],
    ("zh", "en"): [("wikititles-v3", f"{DATA_STATMT}/wikititles/v3/wikititles-v3.zh-en.tsv")],
    ("de", "fr"): [("nc-v16", f"{DATA_STATMT}/news-commentary/v16/training/"
                              "news-commentary-v16.de-fr.tsv.gz")],
}


def _lsl():
    res, stored = {}, {}
    res["flores101"] = Resource("flores101", "https://dl.fbaipublicfiles.com/flores101/dataset/"
                                "flores101_dataset.tar.gz", dest="")
    res["opus100"] = OPUS100.resources["opus100"]
    for a, b in itertools.combinations(LSL_LANGS, 2):
        train = []
        for corpus, version, quality in (("CCMatrix", "v1", "lq"), ("Tatoeba", "v2023-04-12", "hq")):
            r, s = _moses(corpus, version, a, b, optional=corpus == "Tatoeba", quality=quality)
            res[r.name] = r
            train.append(s)
        if "en" in (a, b) and "sw" not in (a, b):
            x = b if a == "en" else a
            train += _opus100_language(None, x)["train"]
        for (l1, l2), releases in WMT21_OPTIONAL.items():
            if {l1, l2} == {a, b}:
                for name, url in releases:
                    r = Resource(f"{name}-{l1}-{l2}", url, dest=f"wmt/{name}", unpack=False)
                    res[r.name] = r
                    train.append(Source(r.name, (l1, l2), (f"wmt/{name}/{r.file}",), r.name,
                                        "tsv", (0, 1), optional=True))
        fl = lambda split: Source("flores101", (a, b), tuple(
            f"flores101_dataset/{split}/{FLORES101_CODES[x]}.{split}" for x in (a, b)), "flores101")
        stored[_pair(a, b)] = {"train": train, "valid": [fl("dev")], "test": [fl("devtest")]}
    return stored, res


LSL_STORED, _LSL_RESOURCES = _lsl()


def _lsl_layout(spec, langs, direction):
    stored, pairs, zero = {}, [], []
    for a, b in itertools.combinations(sorted(set(langs) | {spec.pivot}), 2):
        splits = LSL_STORED[_pair(a, b)]
        trained = direction == "m2m" or "en" in (a, b) or LSL_GROUPS[a] == LSL_GROUPS[b]
        if trained:
            stored[_pair(a, b)] = splits
            pairs += [_pair(a, b), _pair(b, a)]
        else:
            stored[_pair(a, b)] = {s: v for s, v in splits.items() if s != "train"}
            zero += [_pair(a, b), _pair(b, a)]
    return Layout(stored, pairs, zero)


LSL10 = CorpusSpec(
    name="lsl10", title="LSL 10 languages, Flores-101 dev/devtest",
    reproduces="LSL paper Sec. 4 Tables 1-5 (all 90 directions) and Table 6 (zero-shot, "
               "--direction groups); data App. B Table 7",
    pivot="en", languages=tuple(x for x in LSL_LANGS if x != "en"),
    directions={"m2m": "all 90 directions (Sec. 4.1-4.5)",
                "groups": "English-centric + within-group pairs (European, CJK, Swahili); the "
                          "other directions test-only (zero-shot, Sec. 4.6, Table 6)"},
    vocab_size=250000, vocab_source="LSL Sec. 4 ('vocabulary size of 250k, character coverage "
                                    "of 0.9995', 1.5M sentences sampled per language)",
    spm_sampling={"per_language": 1_500_000},
    train_sampling={"paper": "--sampling-method concat"},
    resources=_LSL_RESOURCES, layout=_lsl_layout,
    lq_downsample={"temperature": 5, "max_factor": 10},
    notes=("training sources: CCMatrix v1 (low quality, downsampled with T=5 against the other "
           "sources, at most 10x, App. B), Tatoeba, OPUS-100 (English pairs), and the WMT21 "
           "releases listed as optional; the paper's other WMT21 sources (ParaCrawl, WikiMatrix, "
           "UN, JESC, KFTT, back-translations) are not fetched",
           "the <HQ>/<LQ> corpus tags of Sec. 4 are not added; the manifest records each "
           "pair's counts per quality",
           "OPUS-100 has no Swahili; sw pairs come from CCMatrix and Tatoeba"))


CORPORA = {c.name: c for c in (OPUS100, WMT14, TED8_RELATED, TED8_DIVERSE, PUBLIC24, LSL10)}
