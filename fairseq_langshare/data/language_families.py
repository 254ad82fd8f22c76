"""Language families: which languages share an encoder or a decoder in the multi-stack baseline.

The shipped table gives every language two groupings:

* **genus** (the default): a close-relationship group at the level of WALS genera (Dryer &
  Haspelmath, *The World Atlas of Language Structures Online*, 2013), named as MT papers usually
  name them: Romance, Germanic, Slavic, Indo-Aryan, Iranian, Turkic, Finnic, Semitic, Bantu,
  Sinitic, ... Dravidian is kept as one group (WALS splits it in two genera).
* **family**: the top-level family (Glottolog / Ethnologue, Lewis 2009, the source the
  adaptive-sparse paper cites): Indo-European, Uralic, Turkic, Afro-Asiatic, Niger-Congo,
  Sino-Tibetan, ... Turkic and Mongolic are separate families (no "Altaic"). For the paper's
  Public-24 languages this gives exactly its eight groups (appendix C.1).

Creoles are grouped as "Creole" and constructed languages as "Constructed" at both levels.

Lookup of a code: the exact code, then the code before ``_``/``@``/``.`` (``pt_BR``, ``sr_latin``,
``zh_CN`` -> ``pt``, ``sr``, ``zh``), each also through a few ISO 639-2/3 aliases (``fra``,
``deu``, ``cmn``, the TED-8 codes). A families file (``--language-families FILE``: TSV
``lang<TAB>family``, ``#`` starts a comment line) overrides and extends the table and is consulted
first, whatever the level.
"""

import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["LanguageFamilyError", "LEVELS", "SHIPPED", "ALIASES", "read_families_file", "resolve_families",
           "family_of", "encode_family_map", "decode_family_map", "group_ids"]

LEVELS = ("genus", "family")

# genus | family | ISO 639-1 (or 639-3 where there is no 639-1) codes
_TABLE = """
Germanic | Indo-European | en de nl af da sv no nb nn is fo fy yi lb li nds bar ang sco gsw
Romance | Indo-European | fr es pt it ro mo ca gl oc an ast fur frp sc wa co la lad rm lij vec scn
Slavic | Indo-European | ru uk be pl cs sk sl hr sr bs sh mk bg csb hsb dsb cu rue
Baltic | Indo-European | lt lv ltg sgs
Celtic | Indo-European | ga gd cy br gv kw
Greek | Indo-European | el grc
Albanian | Indo-European | sq
Armenian | Indo-European | hy
Indo-Aryan | Indo-European | hi ur bn pa gu mr ne si as or sd mai kok dv pi sa rom bho awa mag
Iranian | Indo-European | fa ps ku kmr ckb tg os bal glk mzn zza
Turkic | Turkic | tr az kk ky uz tk tt ba cv crh ug sah gag krc kaa
Mongolic | Mongolic | mn bua xal
Finnic | Uralic | fi et liv vro krl
Ugric | Uralic | hu
Saami | Uralic | se sma smj smn sms
Permic | Uralic | kv udm koi
Mari | Uralic | mhr mrj
Mordvin | Uralic | myv mdf
Semitic | Afro-Asiatic | ar he mt am ti tig gez arz apc ary syc
Cushitic | Afro-Asiatic | so om byn aa sid
Omotic | Afro-Asiatic | wal
Berber | Afro-Asiatic | kab tzm zgh shi rif ber
Chadic | Afro-Asiatic | ha
Bantu | Niger-Congo | sw zu xh rw rn lg ki ve nso sn ny ln st tn ts ss nr kg kam umb lua luy kj ng hz bem tum
Kwa | Niger-Congo | ak tw ee
Defoid | Niger-Congo | yo
Igboid | Niger-Congo | ig
Atlantic | Niger-Congo | wo ff
Mande | Niger-Congo | bm dyu
Gur | Niger-Congo | mos
Songhay | Nilo-Saharan | son dje ses
Nilotic | Nilo-Saharan | ach luo din nus kln
Saharan | Nilo-Saharan | kr
Kartvelian | Kartvelian | ka xmf
Basque | Basque | eu
Nakh | Nakh-Daghestanian | ce inh
Avar-Andic | Nakh-Daghestanian | av
Northwest Caucasian | Abkhaz-Adyge | ab ady kbd
Dravidian | Dravidian | ta te kn ml tcy
Sinitic | Sino-Tibetan | zh yue wuu nan hak gan
Lolo-Burmese | Sino-Tibetan | my
Bodic | Sino-Tibetan | bo dz
Tai | Tai-Kadai | th lo shn
Viet-Muong | Austroasiatic | vi
Khmer | Austroasiatic | km
Munda | Austroasiatic | sat
Malayo-Sumbawan | Austronesian | id ms jv su min bjn mad
Chamic | Austronesian | ace
Philippine | Austronesian | tl fil ceb ilo war pag bcl hil pam
Barito | Austronesian | mg
Oceanic | Austronesian | mi haw sm to fj na ty mh gil
Chamorro | Austronesian | ch
Japanese | Japonic | ja
Korean | Koreanic | ko
Ainu | Ainu | ain
Eskimo | Eskimo-Aleut | iu kl ik
Iroquoian | Iroquoian | chr
Athabaskan | Na-Dene | nv
Aymaran | Aymaran | ay
Quechuan | Quechuan | qu
Tupi-Guarani | Tupian | gn
Aztecan | Uto-Aztecan | nah
Constructed | Constructed | eo ia ie io vo jbo
Creole | Creole | ht pap bi jam tpi srn
"""

# ISO 639-2/B, 639-2/T and 639-3 codes of common MT languages (TED, WMT, FLORES) -> the table's code
ALIASES = dict(pair.split("=") for pair in """
ara=ar aze=az bel=be ben=bn bos=bs bul=bg cat=ca ces=cs cze=cs dan=da deu=de ger=de ell=el gre=el
eng=en est=et eus=eu baq=eu fas=fa per=fa pes=fa fin=fi fra=fr fre=fr glg=gl guj=gu heb=he hin=hi
hrv=hr hun=hu hye=hy arm=hy ind=id isl=is ice=is ita=it jpn=ja kat=ka geo=ka kaz=kk khm=km kor=ko
kur=ku lav=lv lvs=lv lit=lt mar=mr mkd=mk mac=mk mon=mn khk=mn msa=ms may=ms zsm=ms mya=my bur=my
nep=ne npi=ne nld=nl dut=nl nob=nb nno=nn nor=no pol=pl por=pt pus=ps pbt=ps ron=ro rum=ro rus=ru
sin=si slk=sk slo=sk slv=sl spa=es sqi=sq alb=sq srp=sr swa=sw swh=sw swe=sv tam=ta tel=te tha=th
tur=tr ukr=uk urd=ur uzb=uz uzn=uz vie=vi zho=zh chi=zh cmn=zh xho=xh zul=zu yor=yo ibo=ig hau=ha
amh=am som=so tgl=tl afr=af kan=kn mal=ml pan=pa ori=or ory=or asm=as snd=sd tat=tt kir=ky tuk=tk
tgk=tg uig=ug kin=rw lug=lg orm=om gaz=om lin=ln nya=ny sna=sn wol=wo ful=ff fuv=ff jav=jv sun=su
mlt=mt cym=cy wel=cy gle=ga gla=gd bre=br oci=oc ltz=lb epo=eo
""".split())


class LanguageFamilyError(ValueError):
    pass


def _parse_table(text: str) -> Dict[str, Tuple[str, str]]:
    table: Dict[str, Tuple[str, str]] = {}
    for line in text.strip().splitlines():
        genus, family, codes = (part.strip() for part in line.split("|"))
        for code in codes.split():
            if code in table:
                raise AssertionError(f"language family table lists {code} twice")
            table[code] = (genus, family)
    return table


SHIPPED: Dict[str, Tuple[str, str]] = _parse_table(_TABLE)


def _bad_name(name: str) -> bool:
    return not name or any(c in name for c in ",=\t\n")


def read_families_file(path) -> Dict[str, str]:
    """``lang<TAB>family`` lines of ``path`` (``#`` lines and blank lines ignored) as a dict."""
    path = Path(path)
    if not path.is_file():
        raise LanguageFamilyError(f"--language-families {path}: no such file; pass a TSV file of lang<TAB>family lines")
    out: Dict[str, str] = {}
    where: Dict[str, int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.rstrip("\r\n").split("\t")]
        if len(parts) != 2 or not parts[0] or _bad_name(parts[1]) or any(c in parts[0] for c in ",= "):
            raise LanguageFamilyError(
                f"--language-families {path} line {number}: expected 'lang<TAB>family' (one tab, a family name "
                f"without ',' or '='), got {line.strip()!r}")
        code, family = parts
        if code in out:
            raise LanguageFamilyError(f"--language-families {path}: {code} is listed on lines {where[code]} and "
                                      f"{number}; keep one")
        out[code], where[code] = family, number
    return out


def _candidates(code: str) -> List[str]:
    base = re.split(r"[_@.]", code, maxsplit=1)[0]
    out = []
    for c in (code, code.lower(), base, base.lower()):
        if c not in out:
            out.append(c)
    return out


def family_of(code: str, overrides: Optional[Dict[str, str]] = None, level: str = "genus",
              source: Optional[str] = None) -> str:
    """The family of ``code``: the families file first, then the shipped table at ``level``."""
    if level not in LEVELS:
        raise LanguageFamilyError(f"--language-family-level must be one of {', '.join(LEVELS)}, got {level!r}")
    candidates = _candidates(code)
    for c in candidates:
        if overrides and c in overrides:
            return overrides[c]
    for c in candidates:
        c = ALIASES.get(c, c)
        if c in SHIPPED:
            return SHIPPED[c][LEVELS.index(level)]
    where = f"in neither the shipped language family table nor {source}" if source else "not in the shipped language family table"
    fix = f"add a line '{code}<TAB>FAMILY' to {source}" if source else (
        f"add a line '{code}<TAB>FAMILY' to a families file (TSV, # comments) and pass --language-families FILE")
    raise LanguageFamilyError(f"language {code!r} is {where}: {fix}")


def resolve_families(langs: Sequence[str], path=None, level: str = "genus") -> Dict[str, str]:
    """{code: family} for every language of ``langs``, in ``langs`` order."""
    overrides = read_families_file(path) if path else None
    return {code: family_of(code, overrides, level, source=str(path) if path else None) for code in langs}


def encode_family_map(families: Dict[str, str]) -> str:
    """``{"en": "Germanic", "fr": "Romance"}`` -> ``"en=Germanic,fr=Romance"`` (the saved-config form)."""
    for code, family in families.items():
        if _bad_name(family):
            raise LanguageFamilyError(f"family name {family!r} of {code}: names cannot contain ',', '=' or tabs")
    return ",".join(f"{code}={family}" for code, family in families.items())


def decode_family_map(text: Optional[str]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        code, sep, family = item.partition("=")
        if not sep or not code.strip() or not family.strip():
            raise LanguageFamilyError(f"--language-family-map {text!r}: expected 'lang=family,lang=family,...', "
                                      f"got {item!r}")
        out[code.strip()] = family.strip()
    return out


def group_ids(keys: Sequence[str], order: Optional[Sequence[str]] = None) -> Tuple[List[str], List[int]]:
    """Groups of ``keys`` (one key per language id): (group names, group id per language id).

    Group ids number the groups by their first appearance in ``order`` (default: ``keys``), so they
    are deterministic given the inventory."""
    names: List[str] = []
    for key in list(order or []) + list(keys):
        if key not in names:
            names.append(key)
    used = [n for n in names if n in set(keys)]
    return used, [used.index(k) for k in keys]
