#!/usr/bin/env python3
"""Deterministic generator of the secret-redaction benchmark corpus.

Writes tests/fixtures/secrets/corpus.jsonl (one JSON object a line):

    {"class": "A", "kind": "...", "text": "...", "secrets": ["...", ...]}

Classes A-G are positives (every string in `secrets` occurs in `text` and must
be gone from a redactor's output); class N holds negatives (`secrets` is empty
and a redactor should report nothing). All values are random but shaped like
the real formats; nothing here is a live credential.

Standard library only; the output depends only on the seed below.
Run:  python3 benches/secrets/gen_corpus.py [--out PATH]
"""

import argparse
import base64
import json
import re
import string
import struct
import urllib.parse
import zlib
from collections import Counter, OrderedDict
from pathlib import Path
import random

R = random.Random(2511)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "secrets" / "corpus.jsonl"

# Positive counts per class (negatives: N_NEG).
TARGETS = OrderedDict([("A", 760), ("B", 320), ("C", 440), ("D", 880),
                       ("E", 440), ("F", 440), ("G", 220)])
N_NEG = 1850

UP = string.ascii_uppercase
LO = string.ascii_lowercase
DI = string.digits
ALNUM = UP + LO + DI
LOALNUM = LO + DI
UPALNUM = UP + DI
HEX = "0123456789abcdef"
UHEX = HEX.upper()
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
B32 = UP + "234567"
BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
SYMS = "!@#$%^&*-_+=?.~"

# Substrings that make a value look like a placeholder; positives never hold them.
BANNED = ("example", "changeme", "change_me", "xxx", "1234567890", "abcdef",
          "your_", "your-", "<", ">", "${", "placeholder", "dummy", "redact",
          "fake", "sample", "0000", "password", "secret", "token", "null",
          "none", "undefined", "string", "test123", "todo")


# Checked on every positive secret as a whole (structural runs like AAAA allowed).
PLACEHOLDER_HINTS = ("example", "changeme", "xxx", "your_", "your-", "<", ">", "${",
                     "1234567890", "abcdef", "placeholder", "dummy")


def ok(value):
    low = value.lower()
    if any(b in low for b in BANNED):
        return False
    if re.search(r"(.)\1\1\1", value):
        return False
    return True


def rs(alpha, n):
    while True:
        s = "".join(R.choice(alpha) for _ in range(n))
        if ok(s):
            return s


def rhex(n):
    return rs(HEX, n)


def b64url_nopad(b):
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


def rb64(nbytes, url=False, pad=True):
    while True:
        b = R.randbytes(nbytes)
        s = base64.urlsafe_b64encode(b).decode() if url else base64.b64encode(b).decode()
        if not pad:
            s = s.rstrip("=")
        if ok(s):
            return s


def ruuid():
    h = rhex(32)
    h = h[:12] + "4" + h[13:16] + R.choice("89ab") + h[17:]
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def digits(n, lead_nonzero=True):
    while True:
        s = (R.choice("123456789") if lead_nonzero else R.choice(DI)) + "".join(
            R.choice(DI) for _ in range(n - 1))
        if ok(s) and "1234" not in s and "4321" not in s:
            return s


# --------------------------------------------------------------------------
# vocabulary

WORDS = """summer winter spring autumn dragon monkey tiger falcon shadow sunshine
purple orange coffee pepper rocket galaxy thunder silver golden ocean river forest
maple cherry banana mango pirate ninja wizard castle hockey soccer baseball guitar
piano jungle desert canyon harbor meadow violet crimson cobalt copper marble velvet
panda koala otter badger raven eagle phoenix comet nebula quartz pebble willow cedar
birch lotus tango delta bravo charlie kilo zulu mercury saturn jupiter neptune apollo
gemini orion atlas titan zephyr blizzard tornado cactus bamboo walnut almond biscuit
muffin pretzel waffle nacho taco burrito sushi ramen espresso latte mocha horse
battery staple correct lantern anchor compass voyage summit glacier prairie tundra
island lagoon buffalo jaguar cougar lynx viking samurai knight bishop rook matrix
vector pixel kernel socket hunter ranger sparrow puffin walrus lobster mustang
bronco raptor condor canary cobra python gecko iguana turtle dolphin orca marlin
salmon trout pickle cookie brownie cupcake donut bagel noodle dumpling kimchi
paprika ginger nutmeg saffron basil oregano thyme juniper aspen sequoia redwood
spruce hazel acorn clover daisy tulip orchid poppy lilac jasmine magnolia ember
blaze frost storm cyclone monsoon aurora eclipse zenith vertex prism crystal
granite basalt obsidian topaz garnet ruby sapphire emerald onyx jade amber""".split()

USERS = ["admin", "root", "bob", "alice", "jdoe", "svc_backup", "deploy", "app_user",
         "reporting", "etl", "jenkins", "grafana", "postgres", "sa", "dbadmin", "webapp",
         "api", "mchen", "priya.k", "t.nguyen", "ops", "monitor", "readonly",
         "analytics", "svc-billing", "kafka", "airflow", "metabase", "wp_user",
         "backup_op", "cmurphy", "l.garcia", "oracle", "scott", "hr_app", "replicator",
         "svc_sonar", "gitlab-runner", "nagios", "zabbix", "tomcat", "ftpuser", "m.rossi",
         "k.tanaka", "dev01", "qa_bot", "integration", "mailer", "noc"]

FIRST = ["Ana", "Ben", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines",
         "Jonas", "Kemi", "Luca", "Maya", "Nikhil", "Olga", "Pedro", "Quinn", "Rosa",
         "Sven", "Tara", "Umar", "Vera", "Wei", "Yara", "Zoe"]

HOSTS = ["db01.internal", "10.0.3.17", "pg-prod.c9x2k1lqz7.us-east-1.rds.amazonaws.com",
         "mysql.staging.acme.io", "redis-master.cache.svc.cluster.local", "rabbit.corp.lan",
         "mongo-0.mongo.default.svc", "192.168.1.20", "sql-prod-02.northwind.local",
         "files.partner-exchange.net", "10.20.0.5", "db.billing.internal",
         "orders-db.cluster-cx8q2.eu-west-1.rds.amazonaws.com", "172.16.8.44",
         "warehouse.analytics.lan", "mq.prod.bluefin.io", "cache-01.dc2.lan",
         "pg.infra.kestrel.dev", "legacy-sql.hq.local", "10.1.12.9"]

DBS = ["app", "orders", "billing", "analytics", "inventory", "crm", "hr", "wordpress",
       "metrics", "payments", "users", "reporting", "warehouse", "shop", "auth"]

API_HOSTS = ["api.internal.acme.io", "billing.acme.io", "10.0.3.17:8443", "grafana.ops.internal",
             "jira.corp.lan", "nexus.build.lan", "partner-api.northwind.com", "reports.bluefin.io",
             "gw.kestrel.dev", "localhost:8080"]

PATHS = ["/v1/orders", "/api/v2/users", "/internal/metrics", "/v3/reports/daily",
         "/api/items?limit=50", "/graphql", "/v1/charges", "/export/csv"]

TIMES = ["2024-01-17T09:14:22.481Z", "2024-03-02 11:05:43,118", "2023-11-28T23:59:01Z",
         "Mar 14 06:25:01", "2024-06-09 14:22:10.004", "[2024-02-20 08:00:13]",
         "2025-01-03T17:41:09+01:00", "2024-09-30 02:11:57 UTC"]


def user():
    return R.choice(USERS)


def host():
    return R.choice(HOSTS)


def apihost():
    return R.choice(API_HOSTS)


def db():
    return R.choice(DBS)


def ts():
    return R.choice(TIMES)


def name():
    return R.choice(FIRST)


LEET = {"a": "4@", "e": "3", "i": "1!", "o": "0", "s": "$5", "t": "7", "l": "1"}


def _pw_raw():
    k = R.randrange(11)
    w = R.choice(WORDS)
    if k == 0:   # Summer2024!
        return w.capitalize() + str(R.randint(1990, 2026)) + R.choice("!@#$*?.")
    if k == 1:   # hunter2x
        return w + str(R.randint(0, 99)) + R.choice(LO)
    if k == 2:   # Tr0ub4dor&3
        out = []
        for ch in w + R.choice(WORDS)[:R.randint(2, 4)]:
            if ch in LEET and R.random() < 0.6:
                out.append(R.choice(LEET[ch]))
            else:
                out.append(ch)
        return "".join(out).capitalize() + R.choice("&%#!*") + str(R.randint(1, 99))
    if k == 3:   # random 8-20 with symbols
        while True:
            s = rs(ALNUM + SYMS, R.randint(8, 20))
            if any(c in DI for c in s):
                return s
    if k == 4:   # passphrase
        ws = R.sample(WORDS, R.randint(3, 4))
        s = "-".join(ws)
        return s + ("-" + str(R.randint(1, 99)) if R.random() < 0.4 else "")
    if k == 5:
        return rs(ALNUM, R.randint(10, 16))
    if k == 6:   # BlueOcean42!
        return w.capitalize() + R.choice(WORDS).capitalize() + str(R.randint(10, 99)) + R.choice(["", "!", "#", "$", "?"])
    if k == 7:
        return w + R.choice(["_", ".", ""]) + str(R.randint(1960, 2010))
    if k == 8:
        return w.capitalize() + R.choice("!@#$") + R.choice(WORDS) + str(R.randint(1, 9))
    if k == 9:
        return rs(LOALNUM, R.randint(8, 12))
    return w.capitalize() + "." + R.choice(WORDS).capitalize() + "." + str(R.randint(2019, 2026))


def password(forbid="", minlen=6):
    while True:
        p = _pw_raw()
        if len(p) < minlen or any(c in forbid for c in p):
            continue
        if any(c in p for c in "'\"\\` \t/:"):
            continue
        if not ok(p):
            continue
        return p


SH_UNQ = "!$&*?#;|<>()[]{}~^%"       # unsafe unquoted in a shell line
SH_DQ = "$!"                           # unsafe inside double quotes
URLSAFE = "@#?%&=+^/:"                 # keep URL userinfo unencoded


def generic_token():
    k = R.randrange(6)
    if k == 0:
        return rhex(32)
    if k == 1:
        return rhex(40)
    if k == 2:
        return rs(ALNUM, R.randint(24, 48))
    if k == 3:
        return rb64(30)
    if k == 4:
        return rs(B64URL, R.randint(32, 44))
    return rhex(64)


def q(v, kinds=("", "", '"', "'")):
    c = R.choice(kinds)
    return c + v + c


# --------------------------------------------------------------------------
# registry

GENS = {c: [] for c in list(TARGETS) + ["N"]}


def gen(cls):
    def deco(f):
        GENS[cls].append(f)
        return f
    return deco


# ==========================================================================
# Class A: short or abbreviated labels in prose and docs

PW_LABELS = ["pw", "pwd", "pass", "PW", "PWD", "Pass", "PASS", "Pw", "password",
             "Password", "PASSWORD", "passwd", "Passwd", "passcode", "Passcode", "pword",
             "Pword", "pswd", "PassWord", "pword", "p/w"]
SEPS = [": ", ":", "=", " = ", "=>", " => ", ":=", " - ", " -- ", " ", ": ", "="]


@gen("A")
def a_label_inline():
    pw = password()
    pre = R.choice(["Guest wifi ", "staging box ", "VPN ", "NAS admin ", "printer ", "Jenkins ",
                    "", "FYI ", "new ", "temp ", "router ", "Grafana ", "test laptop "])
    suf = R.choice(["", " (rotate after the demo)", " - don't share", ".", " thx", " until Friday"])
    return f"{pre}{R.choice(PW_LABELS)}{R.choice(SEPS)}{q(pw)}{suf}", [pw]


@gen("A")
def a_id_pw():
    u, pw = user(), password(",;")
    fmt = R.choice(["ID:{u} PW:{p}", "ID: {u} / PW: {p}", "id={u} pw={p}", "ID - {u}  PW - {p}",
                    "Id:{u}, Pw:{p}", "ID {u} PW {p}", "acct: {u} pwd: {p}"])
    return fmt.format(u=u, p=pw), [pw]


@gen("A")
def a_user_pass_pair():
    u, pw = user(), password(",;&")
    fmt = R.choice(["user={u},pass={p}", "user={u};pwd={p}", "username={u}, password={p}",
                    "usr={u} pwd={p}", "User={u}, Pass={p}", "uname: {u} passwd: {p}"])
    return fmt.format(u=u, p=pw), [pw]


@gen("A")
def a_login_password():
    u, pw = user(), password("|")
    fmt = R.choice(["login: {u} / password: {p}", "Login: {u} | Password: {p}",
                    "login {u}, password {p}", "LOGIN: {u}\nPASSWORD: {p}",
                    "Log in as {u} with password {p}"])
    return fmt.format(u=u, p=pw), [pw]


@gen("A")
def a_username_password_plain():
    u, pw = user(), password()
    fmt = R.choice(["username {u} password {p}", "Username {u} Password {p}",
                    "user {u} pass {p}", "username: {u}  password: {p}"])
    return fmt.format(u=u, p=pw), [pw]


@gen("A")
def a_email():
    pw, n = password(), name()
    sys_ = R.choice(["the staging database", "your VPN account", "the shared mailbox",
                     "the reporting server", "your Okta account", "the wiki admin user"])
    phr = R.choice(["The new password is {p}", "Your temporary password is: {p}",
                    "I've reset it, new pwd: {p}", "Password has been set to {p}",
                    "use this password: {p}"]).format(p=pw)
    text = (f"Hi {n},\n\nI've set up access to {sys_}. {phr}\n"
            f"Please change it after your first login.\n\nThanks,\n{name()} (IT Service Desk)")
    return text, [pw]


@gen("A")
def a_ticket():
    pw = password()
    key = R.choice(["OPS", "INFRA", "DBA", "SEC", "HELP", "IT"]) + "-" + str(R.randint(100, 9999))
    body = R.choice(["pwd for the db: {p}", "temp pass: {p}", "Reset done, new password is {p}",
                     "creds rotated - pw now {p}", "DB pass => {p}", "service acct password: {p}"]).format(p=pw)
    fmt = R.choice(["{k}: {b}", "[{k}] {b}", "Comment on {k} by {n}:\n{b}", "Re: {k} - {b}"])
    return fmt.format(k=key, b=body, n=name()), [pw]


@gen("A")
def a_chat():
    pw = password()
    who = R.choice(USERS)
    line = R.choice(["try pw {p}", "the pass is {p}", "pwd {p}", "it's {p} (the password)",
                     "password = {p}", "pw: `{p}`", "pass is `{p}` lol"]).format(p=pw)
    fmt = R.choice(["[09:12] <{w}> {l}", "{w}: {l}", "{w} 10:42 AM\n{l}", "<{w}> {l}"])
    return fmt.format(w=who, l=line), [pw]


TOKEN_LABELS = ["token", "Token", "TOKEN", "auth token", "access token", "bearer token",
                "Auth Token", "api token", "tok"]


@gen("A")
def a_token_bare():
    t = generic_token()
    pre = R.choice(["", "CI ", "for the webhook ", "Sentry ", "deploy ", "bot ", "prod "])
    return f"{pre}{R.choice(TOKEN_LABELS)}{R.choice(SEPS)}{q(t)}", [t]


@gen("A")
def a_key_bare():
    t = generic_token()
    lab = R.choice(["key", "Key", "KEY", "license key", "signing key", "enc key", "master key", "hmac key"])
    return f"{lab}{R.choice(SEPS)}{q(t)}", [t]


@gen("A")
def a_secret_bare():
    t = generic_token() if R.random() < 0.7 else password()
    lab = R.choice(["secret", "Secret", "SECRET", "client secret", "shared secret",
                    "webhook secret", "app secret", "Client Secret"])
    return f"{lab}{R.choice(SEPS)}{q(t)}", [t]


@gen("A")
def a_api_key():
    t = generic_token()
    lab = R.choice(["api key", "API key", "API Key", "apikey", "Api-Key", "API_KEY", "api-key", "APIKEY"])
    pre = R.choice(["", "Weather service ", "Maps ", "the ", "Prod ", "sandbox "])
    return f"{pre}{lab}{R.choice(SEPS)}{q(t)}", [t]


def aws_pair():
    return "AKIA" + rs(B32, 16), rb64(30)


@gen("A")
def a_access_key():
    akid, sk = aws_pair()
    fmt = R.choice([
        "access key: {a}\nsecret key: {s}",
        "Access Key ID {a}\nSecret Access Key {s}",
        "ACCESS KEY: {a}  SECRET KEY: {s}",
        "access key id {a} / secret access key {s}",
        "Access key - {a}\nSecret - {s}",
        "AccessKey={a} SecretKey={s}",
    ])
    return fmt.format(a=akid, s=sk), [akid, sk]


@gen("A")
def a_secret_key_only():
    sk = R.choice([rb64(30), rs(ALNUM, 40), rhex(64)])
    lab = R.choice(["SECRET KEY", "secret key", "Secret Key", "SECRET_KEY", "secret-key", "Django SECRET KEY"])
    return f"{lab}{R.choice(SEPS)}{q(sk)}", [sk]


@gen("A")
def a_md_table():
    rows, secs = [], []
    for _ in range(R.randint(1, 3)):
        pw = password("|")
        secs.append(pw)
        rows.append(f"| {R.choice(['prod', 'staging', 'dev', 'qa'])} | {host()} | {user()} | {pw} |")
    hdr = R.choice(["| env | host | user | password |", "| Env | Host | Login | Pass |",
                    "| env | host | user | pwd |"])
    return hdr + "\n|---|---|---|---|\n" + "\n".join(rows), secs


@gen("A")
def a_sticky_note():
    pw = password()
    thing = R.choice(["Router admin", "NAS", "Printer (2nd floor)", "Old Jenkins", "UPS web UI",
                      "IPMI", "Camera NVR", "Synology"])
    return f"{thing}\nuser: {user()}\n{R.choice(['pass', 'pw', 'pwd', 'Pass', 'password'])}: {pw}", [pw]


@gen("A")
def a_wiki_bullet():
    pw = password("),")
    url = R.choice(["https://admin.corp.lan", "http://10.0.0.1:8080", "https://grafana.ops.internal",
                    "https://kibana.dc1.lan", "http://nas.local:5000"])
    fmt = R.choice(["* Admin console: {url} (user {u}, pass {p})",
                    "- {url} -- login {u} / pw {p}",
                    "1. Open {url} and sign in as {u}, password {p}"])
    return fmt.format(url=url, u=user(), p=pw), [pw]


@gen("A")
def a_is_phrase():
    pw = password()
    fmt = R.choice(["the password is {p}", "password was reset to {p}", "new pw is {p}",
                    "pw for the vpn is {p}", "Temporary password: {p}", "use {p} as the password",
                    "The wifi password is \"{p}\"", "admin pass is still {p}, pls rotate",
                    "pwd changed to {p} this morning"])
    return fmt.format(p=pw), [pw]


@gen("A")
def a_zoom_passcode():
    pc = R.choice([digits(6), digits(R.randint(8, 10)), rs(ALNUM, 6), password()])
    mid = f"{R.randint(800, 999)} {R.randint(1000, 9999)} {R.randint(1000, 9999)}"
    fmt = R.choice(["Meeting ID: {m}\nPasscode: {p}", "Join: https://zoom.us/j/{mm}\nPasscode {p}",
                    "Conference bridge {m}, passcode {p}", "Webex meeting {m} - password: {p}"])
    return fmt.format(m=mid, mm=mid.replace(" ", ""), p=pc), [pc]


@gen("A")
def a_creds_slash():
    u, pw = user(), password()
    fmt = R.choice(["creds: {u} / {p}", "Creds {u}/{p}", "credentials: {u} {p}",
                    "login creds are {u} / {p}", "u/p: {u} / {p}"])
    return fmt.format(u=u, p=pw), [pw]


@gen("A")
def a_wifi():
    pw = password()
    ssid = R.choice(["CorpGuest", "Office-5G", "WeWork-Fl3", "Lab_IoT", "Boardroom", "HQ-Visitors"])
    fmt = R.choice(["WiFi: {s}\nPassword - {p}", "SSID: {s}  Key: {p}", "Network {s}, WPA2 key {p}",
                    "wifi {s} / pw {p}", "Guest network: {s} (passcode {p})"])
    return fmt.format(s=ssid, p=pw), [pw]


@gen("A")
def a_passphrase():
    pw = password()
    fmt = R.choice(["passphrase for the deploy key: {p}", "Passphrase: {p}",
                    "the GPG passphrase is {p}", "key passphrase => {p}",
                    "backup encryption passphrase - {p}"])
    return fmt.format(p=pw), [pw]


@gen("A")
def a_password_arrow():
    pw = password()
    lab = R.choice(["password", "Password", "pass", "pw", "pwd"])
    fmt = R.choice(["{l}=>{p}", "{l} => '{p}'", "{l} -> {p}", "{l} --> {p}", "{l}:= {p}"])
    return fmt.format(l=lab, p=pw), [pw]


@gen("A")
def a_doc_setup():
    pw = password()
    fmt = R.choice([
        "## Local setup\n\nThe default admin account is `admin`, pw `{p}`.",
        "Step 3: log into the console (pass: {p}) and enable MFA.",
        "NOTE: the seed user's password => {p}",
        "Default credentials (dev only): admin / {p}",
        "> Password - {p}\n> Change it on first login."])
    return fmt.format(p=pw), [pw]


# ==========================================================================
# Class B: SQL password clauses

def sqlpw():
    return password("'\"\\;")


def rolename():
    return R.choice(["app", "app_rw", "reporting", "etl_loader", "readonly", "svc_api", "analyst",
                     "billing_svc", "replicator", "metabase", "grafana_ro", "backup", "webapp"])


def sqlcase(s, *keep):
    """Lower-case the SQL (35% of the time) but never the secret values."""
    if R.random() >= 0.35:
        return s
    keep = [k for k in keep if k]
    if not keep:
        return s.lower()
    parts = re.split("(" + "|".join(re.escape(k) for k in keep) + ")", s)
    return "".join(p if p in keep else p.lower() for p in parts)


@gen("B")
def b_mysql_create_user():
    pw = sqlpw()
    return sqlcase(f"CREATE USER '{rolename()}'@'{R.choice(['%', 'localhost', '10.0.%'])}' IDENTIFIED BY '{pw}';", pw), [pw]


@gen("B")
def b_mysql_native():
    pw = sqlpw()
    plug = R.choice(["mysql_native_password", "caching_sha2_password", "sha256_password"])
    return sqlcase(f"CREATE USER '{rolename()}'@'%' IDENTIFIED WITH {plug} BY '{pw}';", pw), [pw]


@gen("B")
def b_mysql_alter():
    pw = sqlpw()
    return sqlcase(f"ALTER USER '{R.choice(['root', rolename()])}'@'localhost' IDENTIFIED BY '{pw}';", pw), [pw]


@gen("B")
def b_pg_create_role():
    pw = sqlpw()
    extra = R.choice(["", " NOSUPERUSER", " CREATEDB", " VALID UNTIL '2026-01-01'", " CONNECTION LIMIT 20"])
    return sqlcase(f"CREATE ROLE {rolename()} WITH LOGIN PASSWORD '{pw}'{extra};", pw), [pw]


@gen("B")
def b_pg_encrypted():
    pw = sqlpw()
    return sqlcase(f"CREATE USER {rolename()} WITH ENCRYPTED PASSWORD '{pw}';", pw), [pw]


@gen("B")
def b_pg_alter_role():
    pw = sqlpw()
    fmt = R.choice(["ALTER ROLE {r} PASSWORD '{p}';", "ALTER ROLE {r} WITH PASSWORD '{p}';",
                    "ALTER USER {r} WITH PASSWORD '{p}';", "ALTER USER {r} PASSWORD '{p}' VALID UNTIL 'infinity';"])
    return sqlcase(fmt.format(r=rolename(), p=pw), pw), [pw]


@gen("B")
def b_mssql_login():
    pw = sqlpw()
    fmt = R.choice(["CREATE LOGIN {r} WITH PASSWORD = '{p}';",
                    "CREATE LOGIN [{r}] WITH PASSWORD = N'{p}', CHECK_POLICY = OFF;\nGO",
                    "CREATE LOGIN {r} WITH PASSWORD = '{p}', DEFAULT_DATABASE = [{d}];",
                    "ALTER LOGIN sa WITH PASSWORD = '{p}';\nGO"])
    return sqlcase(fmt.format(r=rolename(), p=pw, d=db()), pw), [pw]


@gen("B")
def b_set_password():
    pw = sqlpw()
    fmt = R.choice(["SET PASSWORD FOR '{r}'@'localhost' = PASSWORD('{p}');",
                    "SET PASSWORD FOR '{r}'@'%' = '{p}';",
                    "SET PASSWORD = PASSWORD('{p}');"])
    return sqlcase(fmt.format(r=rolename(), p=pw), pw), [pw]


@gen("B")
def b_oracle():
    pw = sqlpw()
    fmt = R.choice(['CREATE USER {r} IDENTIFIED BY "{p}" DEFAULT TABLESPACE users QUOTA 100M ON users;',
                    'ALTER USER {r} IDENTIFIED BY "{p}" ACCOUNT UNLOCK;',
                    'CREATE USER c##{r} IDENTIFIED BY "{p}" CONTAINER=ALL;'])
    return sqlcase(fmt.format(r=rolename(), p=pw), pw), [pw]


@gen("B")
def b_oracle_unquoted():
    pw = rs(ALNUM, R.randint(8, 14)) if R.random() < 0.5 else R.choice(WORDS) + str(R.randint(10, 999))
    fmt = R.choice(["ALTER USER {r} IDENTIFIED BY {p};", "CREATE USER {r} IDENTIFIED BY {p};",
                    "alter user system identified by {p} container=all;"])
    return sqlcase(fmt.format(r=rolename().upper(), p=pw), pw), [pw]


@gen("B")
def b_grant_identified():
    pw = sqlpw()
    return sqlcase(f"GRANT ALL PRIVILEGES ON {db()}.* TO '{rolename()}'@'%' IDENTIFIED BY '{pw}' WITH GRANT OPTION;", pw), [pw]


@gen("B")
def b_migration():
    pw = sqlpw()
    r = rolename()
    text = (f"-- migrate:up\nCREATE ROLE {r} LOGIN PASSWORD '{pw}';\n"
            f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {r};\n\n-- migrate:down\nDROP ROLE {r};")
    return text, [pw]


@gen("B")
def b_heredoc():
    pw = sqlpw()
    r = rolename()
    fmt = R.choice([
        "mysql -u root <<EOF\nCREATE USER '{r}'@'%' IDENTIFIED BY '{p}';\nGRANT SELECT ON {d}.* TO '{r}'@'%';\nFLUSH PRIVILEGES;\nEOF",
        "psql -v ON_ERROR_STOP=1 --username postgres <<-EOSQL\n\tCREATE USER {r} WITH PASSWORD '{p}';\n\tCREATE DATABASE {d} OWNER {r};\nEOSQL",
        "sqlplus / as sysdba <<EOF\nCREATE USER {r} IDENTIFIED BY \"{p}\";\nGRANT CONNECT, RESOURCE TO {r};\nEXIT;\nEOF"])
    return fmt.format(r=r, p=pw, d=db()), [pw]


@gen("B")
def b_psql_c():
    pw = sqlpw()
    fmt = R.choice(['psql -U postgres -c "ALTER USER {r} PASSWORD \'{p}\';"',
                    'sudo -u postgres psql -c "CREATE USER {r} WITH PASSWORD \'{p}\'"',
                    'mysql -e "ALTER USER \'{r}\'@\'localhost\' IDENTIFIED BY \'{p}\';"'])
    return fmt.format(r=rolename(), p=pw), [pw]


@gen("B")
def b_dump():
    pw = sqlpw()
    r = rolename()
    text = (f"-- MySQL dump 10.13  Distrib 8.0.36, for Linux (x86_64)\n--\n-- Host: {host()}    Database: {db()}\n"
            f"-- ------------------------------------------------------\n"
            f"/*!40101 SET NAMES utf8mb4 */;\n"
            f"CREATE USER IF NOT EXISTS '{r}'@'%' IDENTIFIED BY '{pw}';")
    return text, [pw]


@gen("B")
def b_db_link():
    pw = sqlpw()
    fmt = R.choice(["CREATE DATABASE LINK remote_{d} CONNECT TO {r} IDENTIFIED BY \"{p}\" USING 'ORCL';",
                    "CREATE SERVER remote_{d} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{h}', dbname '{d}');\n"
                    "CREATE USER MAPPING FOR CURRENT_USER SERVER remote_{d} OPTIONS (user '{r}', password '{p}');"])
    return fmt.format(d=db(), r=rolename(), p=pw, h=host()), [pw]


@gen("B")
def b_snowflake():
    pw = sqlpw()
    fmt = R.choice(["CREATE USER {r} PASSWORD = '{p}' DEFAULT_ROLE = ANALYST MUST_CHANGE_PASSWORD = FALSE;",
                    "ALTER USER {r} SET PASSWORD = '{p}';",
                    "CREATE USER {r} PASSWORD '{p}' IN GROUP analysts;"])
    return sqlcase(fmt.format(r=rolename(), p=pw), pw), [pw]


@gen("B")
def b_clickhouse():
    pw = sqlpw()
    fmt = R.choice(["CREATE USER {r} IDENTIFIED WITH sha256_password BY '{p}';",
                    "CREATE USER IF NOT EXISTS {r} IDENTIFIED WITH plaintext_password BY '{p}' HOST ANY;",
                    "CREATE OR REPLACE USER '{r}'@'%' IDENTIFIED BY '{p}';"])
    return sqlcase(fmt.format(r=rolename(), p=pw), pw), [pw]


@gen("B")
def b_code_exec():
    pw = sqlpw()
    r = rolename()
    fmt = R.choice([
        "cursor.execute(\"CREATE USER {r} WITH PASSWORD '{p}'\")",
        "conn.execute(text(\"ALTER ROLE {r} PASSWORD '{p}'\"))",
        "db.Exec(\"CREATE USER '{r}'@'%' IDENTIFIED BY '{p}'\")",
        "stmt.executeUpdate(\"ALTER USER {r} IDENTIFIED BY \\\"{p}\\\"\");",
        "await knex.raw(\"CREATE ROLE {r} LOGIN PASSWORD '{p}'\");"])
    return fmt.format(r=r, p=pw), [pw]


@gen("B")
def b_do_block():
    pw = sqlpw()
    r = rolename()
    text = (f"DO $$\nBEGIN\n  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{r}') THEN\n"
            f"    CREATE ROLE {r} LOGIN PASSWORD '{pw}';\n  END IF;\nEND\n$$;")
    return sqlcase(text, pw), [pw]


@gen("B")
def b_multi_users():
    secs, lines = [], []
    for _ in range(R.randint(2, 3)):
        pw = sqlpw()
        secs.append(pw)
        lines.append(f"CREATE USER '{rolename()}_{R.randint(1, 9)}'@'%' IDENTIFIED BY '{pw}';")
    return sqlcase("\n".join(lines + ["FLUSH PRIVILEGES;"]), *secs), secs


# ==========================================================================
# Class C: command-line flags and API-call arguments

def shpw():
    return password(SH_UNQ)


@gen("C")
def c_password_flag():
    pw = shpw()
    fmt = R.choice([
        "mongo --host {h} -u {u} --password {p} --authenticationDatabase admin",
        "mysqldump -u {u} --password={p} --single-transaction {d} > {d}.sql",
        "wget --user={u} --password={p} https://{h}/exports/{d}.csv",
        "rabbitmqadmin -u {u} --password {p} list queues",
        "influx -username {u} --password {p} -host {h}",
        "./manage.py changepassword --password {p} {u}",
        "java -jar app.jar --spring.datasource.password={p}"])
    return fmt.format(h=host(), u=user(), p=pw, d=db()), [pw]


@gen("C")
def c_passphrase():
    pw = password(SH_DQ)
    fmt = R.choice(['gpg --batch --yes --passphrase "{p}" -d backup.tar.gz.gpg > backup.tar.gz',
                    "ssh-keygen -t ed25519 -N '{p}' -f ~/.ssh/deploy_key",
                    "openssl pkcs12 -export -in cert.pem -inkey key.pem -out bundle.p12 -passout pass:{p}",
                    "openssl rsa -in server.key -out plain.key -passin 'pass:{p}'",
                    'restic -r s3:s3.amazonaws.com/backups init --password-command "echo {p}"'])
    if "passout pass:" in fmt:
        pw = password(SH_UNQ)
    return fmt.format(p=pw), [pw]


@gen("C")
def c_mysql_p():
    pw = password("'")
    fmt = R.choice(["mysql -u{u} -p'{p}' -h {h} {d}", "mysql -h {h} -u {u} -p'{p}'",
                    "mysqladmin -u root -p'{p}' status", "mysql --user={u} --password='{p}' {d} < dump.sql"])
    if R.random() < 0.3:
        pw = password(SH_UNQ)
        fmt = "mysql -u {u} -p{p} -h {h} {d}"
    return fmt.format(u=user(), p=pw, h=host(), d=db()), [pw]


@gen("C")
def c_putty_pw():
    pw = shpw()
    fmt = R.choice(["plink -ssh {u}@{h} -pw {p} \"uptime\"", "pscp -pw {p} report.csv {u}@{h}:/tmp/",
                    "psftp {u}@{h} -pw {p} -b batch.txt"])
    return fmt.format(u=user(), h=host(), p=pw), [pw]


@gen("C")
def c_named_flags():
    flag = R.choice(["--db-password", "--api-key", "--token", "--client-secret", "--auth-token",
                     "--access-token", "--secret", "--admin-password", "--smtp-password", "--bot-token"])
    v = password(SH_UNQ) if "password" in flag else generic_token()
    sep = R.choice([" ", "="])
    tool = R.choice(["./deploy.sh", "python scripts/sync.py", "node bin/cli.js", "go run ./cmd/seed",
                     "./bin/migrate", "docker run --rm acme/ingest:1.4", "npx release-bot"])
    quoted = q(v, ("", "", '"'))
    return f"{tool} {flag}{sep}{quoted}", [v]


@gen("C")
def c_curl_user():
    u, pw = user(), password(SH_DQ + ":")
    fmt = R.choice(['curl -u "{u}:{p}" https://{h}/api/health',
                    "curl --user {u}:{p} -X POST https://{h}/api/jobs",
                    "curl -s -u '{u}:{p}' 'https://{h}/rest/api/2/search?jql=project=OPS'"])
    if "--user {u}" in fmt:
        pw = password(SH_UNQ + ":")
    return fmt.format(u=u, p=pw, h=apihost()), [pw]


@gen("C")
def c_curl_bearer():
    t = generic_token()
    fmt = R.choice(['curl -H "Authorization: Bearer {t}" https://{h}{pa}',
                    "curl -sS -H 'Authorization: Bearer {t}' -H 'Accept: application/json' https://{h}{pa}",
                    'curl -X POST {h}{pa} -H "Authorization: Token {t}" -d @payload.json',
                    'curl --header "X-Auth-Token: {t}" https://{h}{pa}'])
    return fmt.format(t=t, h=apihost(), pa=R.choice(PATHS)), [t]


@gen("C")
def c_powershell_securestring():
    pw = password("$`\"")
    fmt = R.choice(['$pw = ConvertTo-SecureString -String "{p}" -AsPlainText -Force',
                    "$secure = ConvertTo-SecureString '{p}' -AsPlainText -Force\n$cred = New-Object System.Management.Automation.PSCredential('{u}', $secure)",
                    'New-LocalUser -Name "{u}" -Password (ConvertTo-SecureString "{p}" -AsPlainText -Force)'])
    return fmt.format(p=pw, u=user()), [pw]


@gen("C")
def c_php_curlopt():
    pw = password("$\":")
    u = user()
    fmt = R.choice(['curl_setopt($ch, CURLOPT_PASSWORD, "{p}");',
                    'curl_setopt($ch, CURLOPT_USERPWD, "{u}:{p}");',
                    "curl_setopt_array($ch, [CURLOPT_HTTPAUTH => CURLAUTH_BASIC, CURLOPT_USERPWD => '{u}:{p}']);",
                    'curl_easy_setopt(curl, CURLOPT_PASSWORD, "{p}");'])
    return fmt.format(p=pw, u=u), [pw]


@gen("C")
def c_sshpass():
    pw = password("'")
    fmt = R.choice(["sshpass -p '{p}' ssh -o StrictHostKeyChecking=no {u}@{h}",
                    "sshpass -p '{p}' scp backup.tgz {u}@{h}:/srv/backups/",
                    "sshpass -p {q} rsync -av ./dist/ {u}@{h}:/var/www/"])
    q2 = password(SH_UNQ)
    if "{q}" in fmt:
        return fmt.format(q=q2, u=user(), h=host()), [q2]
    return fmt.format(p=pw, u=user(), h=host()), [pw]


@gen("C")
def c_docker_login():
    pw = password(SH_UNQ) if R.random() < 0.5 else generic_token()
    reg = R.choice(["registry.gitlab.com", "ghcr.io", "myregistry.azurecr.io", "harbor.corp.lan", "docker.io", ""])
    return f"docker login -u {user()} -p {pw} {reg}".rstrip(), [pw]


@gen("C")
def c_htpasswd():
    pw = password(SH_UNQ)
    fmt = R.choice(["htpasswd -b /etc/nginx/.htpasswd {u} {p}", "htpasswd -bc .htpasswd {u} {p}",
                    "htpasswd -nbB {u} {p} >> auth/htpasswd"])
    return fmt.format(u=user(), p=pw), [pw]


@gen("C")
def c_psql_uri():
    pw = password(URLSAFE + SH_DQ)
    fmt = R.choice(['psql "postgresql://{u}:{p}@{h}/{d}"', "psql 'postgres://{u}:{p}@{h}:5432/{d}?sslmode=require'",
                    'pg_dump "postgresql://{u}:{p}@{h}/{d}" -Fc -f {d}.dump'])
    return fmt.format(u=user(), p=pw, h=host(), d=db()), [pw]


@gen("C")
def c_requests_auth():
    pw = password()
    fmt = R.choice(['r = requests.get(url, auth=("{u}", "{p}"))',
                    "resp = requests.post(API_URL, json=payload, auth=('{u}', '{p}'), timeout=10)",
                    'session.auth = ("{u}", "{p}")',
                    'httpx.get(url, auth=("{u}", "{p}"))'])
    return fmt.format(u=user(), p=pw), [pw]


@gen("C")
def c_httpbasicauth():
    pw = password()
    fmt = R.choice(["auth = HTTPBasicAuth('{u}', '{p}')", 'requests.get(url, auth=HTTPBasicAuth("{u}", "{p}"))',
                    "aiohttp.BasicAuth('{u}', '{p}')", 'HTTPDigestAuth("{u}", "{p}")'])
    return fmt.format(u=user(), p=pw), [pw]


@gen("C")
def c_smtp_login():
    pw = password()
    fmt = R.choice(['smtp.login("{u}@mail.acme.io", "{p}")', "server.login('{u}', '{p}')",
                    'imap.login("{u}", "{p}")', "ftp.login(user='{u}', passwd='{p}')"])
    return fmt.format(u=user(), p=pw), [pw]


@gen("C")
def c_db_connect_kw():
    pw = password()
    fmt = R.choice(['cnx = mysql.connector.connect(user="{u}", password="{p}", host="{h}", database="{d}")',
                    "conn = psycopg2.connect(host='{h}', dbname='{d}', user='{u}', password='{p}')",
                    'engine = pymysql.connect(host="{h}", user="{u}", passwd="{p}", db="{d}")',
                    "client = MongoClient('{h}', 27017, username='{u}', password='{p}')",
                    "r = redis.Redis(host='{h}', port=6379, password='{p}')",
                    'client.connect("{h}", username="{u}", password="{p}")'])
    return fmt.format(u=user(), p=pw, h=host(), d=db()), [pw]


@gen("C")
def c_network_credential():
    pw = password()
    fmt = R.choice(['var cred = new NetworkCredential("{u}", "{p}");',
                    'client.Credentials = new NetworkCredential("{u}", "{p}", "CORP");',
                    'new UsernamePasswordCredentials("{u}", "{p}")',
                    'Authenticator.setDefault(new PasswordAuthentication("{u}", "{p}".toCharArray()));'])
    return fmt.format(u=user(), p=pw), [pw]


@gen("C")
def c_windows_cmds():
    pw = password('"%^&|<>')
    fmt = R.choice([r"net use Z: \\fs01\share /user:CORP\{u} {p}",
                    r"psexec \\{h} -u CORP\{u} -p {p} cmd /c ipconfig",
                    "schtasks /create /tn nightly /tr C:\\jobs\\sync.bat /sc daily /ru CORP\\{u} /rp {p}",
                    "cmdkey /generic:TERMSRV/{h} /user:{u} /pass:{p}",
                    "net user {u} {p} /add"])
    return fmt.format(u=user(), h=host(), p=pw), [pw]


@gen("C")
def c_misc_cli():
    pw = password(SH_UNQ)
    fmt = R.choice(["redis-cli -h {h} -a {p} INFO replication",
                    "rabbitmqctl add_user {u} {p}",
                    "keytool -importkeystore -srckeystore app.p12 -srcstorepass {p} -deststorepass {p} -destkeystore app.jks",
                    "ldapsearch -x -H ldap://{h} -D \"cn={u},dc=corp,dc=lan\" -w {p} -b dc=corp,dc=lan",
                    "smbclient //{h}/share -U {u}%{p}",
                    "kubectl create secret generic db-creds --from-literal=username={u} --from-literal=password={p}",
                    "helm install pg bitnami/postgresql --set auth.postgresPassword={p}",
                    "PGPASSWORD={p} pg_dump -h {h} -U {u} {d} > dump.sql",
                    "aws configure set aws_secret_access_key {k}",
                    "az login --service-principal -u {uuid} -p {k} --tenant {uuid2}"])
    k = rb64(30) if "aws" in fmt else rs(ALNUM + "_-.", 40)
    if "{k}" in fmt:
        return fmt.format(k=k, uuid=ruuid(), uuid2=ruuid()), [k]
    return fmt.format(u=user(), h=host(), p=pw, d=db()), [pw]


@gen("C")
def c_js_auth():
    pw = password()
    fmt = R.choice(["axios.get(url, {{ auth: {{ username: '{u}', password: '{p}' }} }})",
                    "const client = new Client({{ user: '{u}', password: '{p}', host: '{h}' }});",
                    "await page.fill('#password', '{p}');",
                    "nodemailer.createTransport({{ host: 'smtp.{h}', auth: {{ user: '{u}', pass: '{p}' }} }})",
                    "mongoose.connect(uri, {{ user: '{u}', pass: '{p}' }})"])
    return fmt.format(u=user(), p=pw, h=host()), [pw]


@gen("C")
def c_api_call_tokens():
    t = generic_token()
    fmt = R.choice(["client = ApiClient(api_key=\"{t}\")", "stripe_client = Client(\"{t}\")",
                    "headers = {{\"Authorization\": \"Bearer {t}\"}}", "gh = Github(login_or_token=\"{t}\")",
                    "sdk.init({{ apiKey: '{t}' }})", "fetch(url, {{ headers: {{ 'X-API-Key': '{t}' }} }})",
                    "req.Header.Set(\"Authorization\", \"Bearer {t}\")"])
    return fmt.format(t=t), [t]


@gen("C")
def c_shell_history():
    pw = password(SH_UNQ)
    n = R.randint(100, 2000)
    fmt = R.choice(["  {n}  mysql -uroot -p{p}", "  {n}  ./backup.sh --password {p}",
                    "  {n}  vault login -method=userpass username={u} password={p}",
                    "  {n}  sudo -S <<< {p} apt-get update",
                    "  {n}  echo {p} | sudo -S systemctl restart nginx"])
    return fmt.format(n=n, p=pw, u=user()), [pw]


# ==========================================================================
# Class D: vendor tokens

def b62(n):
    a = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 62)
        out = a[r] + out
    return out or "0"


def gh_token(prefix):
    body = rs(ALNUM, 30)
    crc = b62(zlib.crc32(body.encode()) & 0xFFFFFFFF).rjust(6, "0")
    return prefix + body + crc


def jwt(payload=None, alg="HS256"):
    iat = R.randint(1700000000, 1760000000)
    hdr = {"alg": alg, "typ": "JWT"}
    if alg.startswith("RS") and R.random() < 0.5:
        hdr["kid"] = rs(B64URL, 22)
    pl = payload or {"sub": ruuid() if R.random() < 0.5 else str(R.randint(1000, 999999)),
                     "iat": iat, "exp": iat + R.choice([900, 3600, 86400])}
    if payload is None and R.random() < 0.5:
        pl["scope"] = R.choice(["read write", "admin", "orders:read", "api"])
    sig = b64url_nopad(R.randbytes(256 if alg.startswith("RS") else 32))
    return (b64url_nopad(json.dumps(hdr, separators=(",", ":")).encode()) + "." +
            b64url_nopad(json.dumps(pl, separators=(",", ":")).encode()) + "." + sig)


VENDORS = []   # (name, fn -> [(VAR, value, is_secret)], self_identifying, special or None)


def vendor(nm, selfid=True, special=None):
    def deco(f):
        VENDORS.append((nm, f, selfid, special))
        return f
    return deco


@vendor("aws", selfid=False)
def _v_aws():
    a, s = aws_pair()
    if R.random() < 0.2:
        a = "ASIA" + a[4:]
    return [("AWS_ACCESS_KEY_ID", a, True), ("AWS_SECRET_ACCESS_KEY", s, True)]


def _sp_gh(vals):
    t = vals[0][1]
    return R.choice([f"git remote set-url origin https://{t}@github.com/acme/infra.git",
                     f"echo {t} | gh auth login --with-token",
                     f"//npm.pkg.github.com/:_authToken={t}"])


@vendor("github", special=_sp_gh)
def _v_github():
    p = R.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "ghp_", "ghp_"])
    return [("GITHUB_TOKEN", gh_token(p), True)]


@vendor("github_pat", special=_sp_gh)
def _v_github_pat():
    return [("GH_TOKEN", "github_pat_" + rs(ALNUM, 22) + "_" + rs(ALNUM, 59), True)]


@vendor("gitlab", special=lambda v: f"git clone https://oauth2:{v[0][1]}@gitlab.com/acme/platform/api.git")
def _v_gitlab():
    p = R.choice(["glpat-", "glpat-", "glptt-", "glrt-", "gloas-", "glimt-"])
    body = {"glpat-": lambda: rs(B64URL, 20), "glptt-": lambda: rhex(40), "glrt-": lambda: rs(B64URL, 20),
            "gloas-": lambda: rhex(64), "glimt-": lambda: rs(B64URL, 25)}[p]()
    return [("GITLAB_TOKEN", p + body, True)]


@vendor("gcp_api_key", special=lambda v: f"https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key={v[0][1]}")
def _v_gcp():
    return [("GOOGLE_API_KEY", "AIza" + rs(B64URL, 35), True)]


def _sp_slack(vals):
    return f"curl -X POST -H 'Content-type: application/json' --data '{{\"text\":\"deploy done\"}}' {vals[0][1]}"


@vendor("slack_bot")
def _v_slack():
    if R.random() < 0.5:
        return [("SLACK_BOT_TOKEN", f"xoxb-{digits(R.randint(10, 13))}-{digits(R.randint(10, 13))}-{rs(ALNUM, 24)}", True)]
    return [("SLACK_USER_TOKEN", f"xoxp-{digits(12)}-{digits(12)}-{digits(13)}-{rhex(32)}", True)]


@vendor("slack_webhook", special=_sp_slack)
def _v_slack_hook():
    return [("SLACK_WEBHOOK_URL", f"https://hooks.slack.com/services/T{rs(UPALNUM, 8)}/B{rs(UPALNUM, R.choice([8, 10]))}/{rs(ALNUM, 24)}", True)]


@vendor("stripe")
def _v_stripe():
    p = R.choice(["sk_live_", "rk_live_", "sk_test_", "sk_live_"])
    return [("STRIPE_SECRET_KEY", p + rs(ALNUM, R.choice([24, 99])), True)]


@vendor("openai")
def _v_openai():
    p = R.choice(["sk-proj-", "sk-proj-", "sk-svcacct-", "sk-admin-"])
    return [("OPENAI_API_KEY", p + rs(B64URL, 74) + "T3BlbkFJ" + rs(B64URL, 74), True)]


@vendor("anthropic")
def _v_anthropic():
    return [("ANTHROPIC_API_KEY", "sk-ant-api03-" + rs(B64URL, 93) + "AA", True)]


@vendor("npm", special=lambda v: f"//registry.npmjs.org/:_authToken={v[0][1]}")
def _v_npm():
    return [("NPM_TOKEN", "npm_" + rs(ALNUM, 36), True)]


@vendor("pypi", special=lambda v: f"[pypi]\n  username = __token__\n  password = {v[0][1]}")
def _v_pypi():
    return [("TWINE_PASSWORD", "pypi-AgEIcHlwaS5vcmc" + rs(B64URL, R.randint(130, 170)), True)]


@vendor("sendgrid")
def _v_sendgrid():
    return [("SENDGRID_API_KEY", "SG." + rs(B64URL, 22) + "." + rs(B64URL, 43), True)]


@vendor("twilio_key")
def _v_twilio_sk():
    h = rhex(32)
    return [("TWILIO_API_KEY", "SK" + (h.upper() if R.random() < 0.3 else h), True)]


@vendor("twilio_account", selfid=False)
def _v_twilio_ac():
    return [("TWILIO_ACCOUNT_SID", "AC" + rhex(32), False), ("TWILIO_AUTH_TOKEN", rhex(32), True)]


@vendor("mailgun")
def _v_mailgun():
    return [("MAILGUN_API_KEY", "key-" + rhex(32), True)]


@vendor("digitalocean")
def _v_do():
    return [("DIGITALOCEAN_TOKEN", R.choice(["dop_v1_", "doo_v1_", "dor_v1_"]) + rhex(64), True)]


@vendor("huggingface")
def _v_hf():
    return [("HF_TOKEN", "hf_" + rs(UP + LO, 34), True)]


@vendor("shopify")
def _v_shopify():
    return [("SHOPIFY_ACCESS_TOKEN", R.choice(["shpat_", "shpca_", "shppa_", "shpss_"]) + rhex(32), True)]


@vendor("google_oauth_secret")
def _v_gocspx():
    return [("GOOGLE_CLIENT_SECRET", "GOCSPX-" + rs(B64URL, 28), True)]


@vendor("newrelic")
def _v_nr():
    return [("NEW_RELIC_API_KEY", "NRAK-" + rs(UPALNUM, 27), True)]


@vendor("supabase")
def _v_supabase():
    if R.random() < 0.5:
        return [("SUPABASE_ACCESS_TOKEN", "sbp_" + rhex(40), True)]
    ref = rs(LO, 20)
    return [("SUPABASE_SERVICE_ROLE_KEY", jwt({"iss": "supabase", "ref": ref, "role": "service_role",
                                               "iat": 1700000000 + R.randint(0, 9 ** 7), "exp": 2010000000 + R.randint(0, 9 ** 7)}), True)]


@vendor("sonarqube")
def _v_sonar():
    return [("SONAR_TOKEN", R.choice(["squ_", "sqp_", "sqa_"]) + rhex(40), True)]


@vendor("sentry")
def _v_sentry():
    return [("SENTRY_AUTH_TOKEN", "sntryu_" + rhex(64), True)]


@vendor("dynatrace")
def _v_dt():
    return [("DT_API_TOKEN", "dt0c01." + rs(UPALNUM, 24) + "." + rs(UPALNUM, 64), True)]


@vendor("databricks")
def _v_databricks():
    return [("DATABRICKS_TOKEN", "dapi" + rhex(32) + R.choice(["", "", "-2", "-3"]), True)]


@vendor("docker_swarm", special=lambda v: f"docker swarm join --token {v[0][1]} 10.0.0.{R.randint(2, 250)}:2377")
def _v_swarm():
    return [("SWARM_JOIN_TOKEN", "SWMTKN-1-" + rs(LOALNUM, 50) + "-" + rs(LOALNUM, 25), True)]


@vendor("postman")
def _v_postman():
    return [("POSTMAN_API_KEY", "PMAK-" + rhex(24) + "-" + rhex(34), True)]


@vendor("nuget", special=lambda v: f"dotnet nuget push bin/Release/*.nupkg --api-key {v[0][1]} --source https://api.nuget.org/v3/index.json")
def _v_nuget():
    return [("NUGET_API_KEY", "oy2" + rs(LOALNUM, 43), True)]


@vendor("alibaba", selfid=False)
def _v_ali():
    return [("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI" + rs(ALNUM, R.choice([16, 20])), True),
            ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", rs(ALNUM, 30), True)]


@vendor("rubygems", special=lambda v: f"---\n:rubygems_api_key: {v[0][1]}")
def _v_rubygems():
    return [("GEM_HOST_API_KEY", "rubygems_" + rhex(48), True)]


@vendor("braintree")
def _v_braintree():
    return [("BRAINTREE_ACCESS_TOKEN", "access_token$production$" + rs(LOALNUM, 16) + "$" + rhex(32), True)]


@vendor("akamai", selfid=False)
def _v_akamai():
    return [("AKAMAI_CLIENT_TOKEN", "akab-" + rs(LOALNUM, 16) + "-" + rs(LOALNUM, 16), True),
            ("AKAMAI_CLIENT_SECRET", rb64(32), True),
            ("AKAMAI_ACCESS_TOKEN", "akab-" + rs(LOALNUM, 16) + "-" + rs(LOALNUM, 16), True)]


@vendor("terraform_cloud", special=lambda v: f'credentials "app.terraform.io" {{\n  token = "{v[0][1]}"\n}}')
def _v_tfc():
    return [("TFE_TOKEN", rs(ALNUM, 14) + ".atlasv1." + rs(B64URL, 67), True)]


@vendor("jwt")
def _v_jwt():
    return [("ACCESS_TOKEN", jwt(alg=R.choice(["HS256", "RS256", "HS512"])), True)]


def _sp_azure_storage(vals):
    acct = rs(LOALNUM, 12)
    return (f"DefaultEndpointsProtocol=https;AccountName={acct};AccountKey={vals[0][1]};"
            f"EndpointSuffix=core.windows.net")


@vendor("azure_storage", selfid=False, special=_sp_azure_storage)
def _v_azure_storage():
    return [("AZURE_STORAGE_KEY", rb64(64), True)]


@vendor("azure_client_secret")
def _v_azure_cs():
    return [("AZURE_CLIENT_SECRET", rs(ALNUM, 3) + R.choice("78") + "Q~" + rs(ALNUM + "_~.-", 34), True)]


@vendor("atlassian")
def _v_atlassian():
    return [("JIRA_API_TOKEN", "ATATT3xFfGF0" + rs(B64URL, 170) + "=" + rs(UHEX, 8), True)]


def _discord():
    uid = str(R.randint(10 ** 17, 13 * 10 ** 17))
    return b64url_nopad(uid.encode()) + "." + rs(B64URL, 6) + "." + rs(B64URL, 38)


@vendor("discord", special=lambda v: f'headers = {{"Authorization": "Bot {v[0][1]}"}}')
def _v_discord():
    return [("DISCORD_BOT_TOKEN", _discord(), True)]


@vendor("telegram", special=lambda v: f"https://api.telegram.org/bot{v[0][1]}/sendMessage?chat_id=-100{digits(10)}&text=alert")
def _v_telegram():
    return [("TELEGRAM_BOT_TOKEN", digits(R.randint(8, 10)) + ":AA" + rs(B64URL, 33), True)]


@vendor("heroku")
def _v_heroku():
    return [("HEROKU_API_KEY", "HRKU-AA" + rs(B64URL, 58), True)]


@vendor("heroku_legacy", selfid=False)
def _v_heroku_legacy():
    return [("HEROKU_API_KEY", ruuid(), True)]


@vendor("linear")
def _v_linear():
    return [("LINEAR_API_KEY", "lin_api_" + rs(ALNUM, 40), True)]


@vendor("doppler")
def _v_doppler():
    return [("DOPPLER_TOKEN", R.choice(["dp.pt.", "dp.st.", "dp.sa.", "dp.st.prd."]) + rs(ALNUM, 43), True)]


@vendor("vault")
def _v_vault():
    if R.random() < 0.5:
        return [("VAULT_TOKEN", "hvs." + rs(ALNUM, 24), True)]
    return [("VAULT_TOKEN", "hvs.CAESI" + rs(B64URL, 86), True)]


@vendor("grafana")
def _v_grafana():
    if R.random() < 0.5:
        return [("GRAFANA_SA_TOKEN", "glsa_" + rs(ALNUM, 32) + "_" + rhex(8), True)]
    inner = json.dumps({"o": str(R.randint(100000, 999999)), "n": "stack-" + str(R.randint(1000, 9999)) + "-deploy",
                        "k": rs(ALNUM, 24), "m": {"r": R.choice(["us", "eu", "prod-us-east-0"])}}, separators=(",", ":"))
    return [("GRAFANA_CLOUD_TOKEN", "glc_" + base64.b64encode(inner.encode()).decode().rstrip("="), True)]


@vendor("cloudflare", selfid=False)
def _v_cloudflare():
    if R.random() < 0.5:
        return [("CLOUDFLARE_API_TOKEN", rs(B64URL, 40), True)]
    return [("CF_API_EMAIL", f"{user().replace('_', '.')}@acme.io", False), ("CF_API_KEY", rhex(37), True)]


@vendor("okta", selfid=False, special=lambda v: f'curl -H "Authorization: SSWS {v[0][1]}" https://acme.okta.com/api/v1/users?limit=25')
def _v_okta():
    return [("OKTA_API_TOKEN", "00" + rs(B64URL, 40), True)]


@vendor("square")
def _v_square():
    return [("SQUARE_ACCESS_TOKEN", R.choice(["sq0atp-" + rs(B64URL, 22), "EAAA" + rs(B64URL, 60), "sq0csp-" + rs(B64URL, 43)]), True)]


@vendor("mapbox")
def _v_mapbox():
    inner = json.dumps({"u": R.choice(USERS).replace("_", ""), "a": rs(LOALNUM, 25)}, separators=(",", ":"))
    return [("MAPBOX_SECRET_TOKEN", "sk." + b64url_nopad(inner.encode()) + "." + rs(B64URL, 22), True)]


@vendor("fastly", selfid=False, special=lambda v: f'curl -X POST -H "Fastly-Key: {v[0][1]}" https://api.fastly.com/service/{rs(ALNUM, 22)}/purge_all')
def _v_fastly():
    return [("FASTLY_API_TOKEN", rs(B64URL, 32), True)]


@vendor("planetscale")
def _v_pscale():
    return [("PLANETSCALE_PASSWORD", R.choice(["pscale_pw_", "pscale_tkn_", "pscale_oauth_"]) + rs(B64URL, 43), True)]


@vendor("pulumi")
def _v_pulumi():
    return [("PULUMI_ACCESS_TOKEN", "pul-" + rhex(40), True)]


@vendor("netlify")
def _v_netlify():
    return [("NETLIFY_AUTH_TOKEN", "nfp_" + rs(ALNUM, 36), True)]


@vendor("vercel", selfid=False)
def _v_vercel():
    return [("VERCEL_TOKEN", rs(ALNUM, 24), True)]


@vendor("airtable")
def _v_airtable():
    return [("AIRTABLE_TOKEN", "pat" + rs(ALNUM, 14) + "." + rhex(64), True)]


@vendor("notion")
def _v_notion():
    if R.random() < 0.5:
        return [("NOTION_TOKEN", "secret_" + rs(ALNUM, 43), True)]
    return [("NOTION_TOKEN", "ntn_" + digits(11) + rs(ALNUM, 35), True)]


@vendor("asana", selfid=False)
def _v_asana():
    if R.random() < 0.5:
        return [("ASANA_ACCESS_TOKEN", "1/" + digits(16) + ":" + rhex(32), True)]
    return [("ASANA_ACCESS_TOKEN", "2/" + digits(16) + "/" + digits(16) + ":" + rhex(32), True)]


@vendor("figma")
def _v_figma():
    return [("FIGMA_TOKEN", "figd_" + rs(B64URL, 40), True)]


@vendor("contentful")
def _v_contentful():
    return [("CONTENTFUL_MANAGEMENT_TOKEN", "CFPAT-" + rs(B64URL, 43), True)]


@vendor("zendesk", selfid=False)
def _v_zendesk():
    return [("ZENDESK_API_TOKEN", rs(ALNUM, 40), True)]


@vendor("flutterwave")
def _v_flw():
    return [("FLW_SECRET_KEY", R.choice(["FLWSECK-", "FLWSECK_TEST-"]) + rhex(32) + "-X", True)]


@vendor("shippo")
def _v_shippo():
    return [("SHIPPO_API_KEY", R.choice(["shippo_live_", "shippo_test_"]) + rhex(40), True)]


def _age():
    return "AGE-SECRET-KEY-1" + rs(BECH32, 58).upper()


@vendor("age", special=lambda v: f"# created: 2024-0{R.randint(1, 9)}-1{R.randint(0, 9)}T10:22:31Z\n# public key: age1{rs(BECH32, 58)}\n{v[0][1]}")
def _v_age():
    return [("SOPS_AGE_KEY", _age(), True)]


@vendor("nats_nkey", special=lambda v: f"-----BEGIN USER NKEY SEED-----\n{v[0][1]}\n------END USER NKEY SEED------")
def _v_nkey():
    return [("NATS_NKEY_SEED", "SU" + rs(B32, 56), True)]


@vendor("tailscale")
def _v_tailscale():
    kind = R.choice(["auth", "api", "client"])
    return [("TS_AUTHKEY", f"tskey-{kind}-k{rs(ALNUM, R.randint(10, 16))}-{rs(ALNUM, 30)}", True)]


@vendor("datadog", selfid=False)
def _v_datadog():
    return [("DD_API_KEY", rhex(32), True), ("DD_APP_KEY", rhex(40), True)]


@vendor("mailchimp")
def _v_mailchimp():
    return [("MAILCHIMP_API_KEY", rhex(32) + "-us" + str(R.randint(1, 21)), True)]


@vendor("dropbox")
def _v_dropbox():
    return [("DROPBOX_ACCESS_TOKEN", "sl." + rs(B64URL, 135), True)]


@vendor("groq")
def _v_groq():
    return [("GROQ_API_KEY", "gsk_" + rs(ALNUM, 52), True)]


@vendor("replicate")
def _v_replicate():
    return [("REPLICATE_API_TOKEN", "r8_" + rs(ALNUM, 37), True)]


@vendor("langsmith")
def _v_langsmith():
    return [("LANGSMITH_API_KEY", R.choice(["lsv2_pt_", "lsv2_sk_"]) + rhex(32) + "_" + rhex(10), True)]


@vendor("perplexity")
def _v_pplx():
    return [("PPLX_API_KEY", "pplx-" + rs(ALNUM, 48), True)]


@vendor("pinecone")
def _v_pinecone():
    return [("PINECONE_API_KEY", "pcsk_" + rs(ALNUM, 5) + "_" + rs(ALNUM, 63), True)]


@vendor("clojars")
def _v_clojars():
    return [("CLOJARS_TOKEN", "CLOJARS_" + rhex(60), True)]


@vendor("prefect")
def _v_prefect():
    return [("PREFECT_API_KEY", "pnu_" + rs(ALNUM, 36), True)]


@vendor("typeform")
def _v_typeform():
    return [("TYPEFORM_TOKEN", "tfp_" + rs(B64URL, 44) + "_" + rs(ALNUM, 14), True)]


@vendor("easypost")
def _v_easypost():
    return [("EASYPOST_API_KEY", "EZAK" + rhex(54), True)]


@vendor("duffel")
def _v_duffel():
    return [("DUFFEL_ACCESS_TOKEN", "duffel_live_" + rs(B64URL, 43), True)]


@vendor("readme")
def _v_readme():
    return [("README_API_KEY", "rdme_" + rs(LOALNUM, 70), True)]


@vendor("adafruit")
def _v_adafruit():
    return [("AIO_KEY", "aio_" + rs(ALNUM, 28), True)]


@vendor("frameio")
def _v_frameio():
    return [("FRAMEIO_TOKEN", "fio-u-" + rs(B64URL, 64), True)]


@vendor("scalingo")
def _v_scalingo():
    return [("SCALINGO_API_TOKEN", "tk-us-" + rs(B64URL, 48), True)]


@vendor("openai_legacy")
def _v_openai_legacy():
    return [("OPENAI_API_KEY", "sk-" + rs(ALNUM, 20) + "T3BlbkFJ" + rs(ALNUM, 20), True)]


def envfile(pairs):
    lines = []
    if R.random() < 0.5:
        lines.append(R.choice(["# production", "# .env - do not commit", "# generated by setup.sh", "# staging"]))
    extra = [("NODE_ENV", "production"), ("PORT", "8080"), ("LOG_LEVEL", "info"), ("APP_NAME", "ingest")]
    lines += [f"{k}={v}" for k, v in R.sample(extra, R.randint(0, 2))]
    lines += [f"{k}={v}" for k, v in pairs]
    return "\n".join(lines)


def lowkey(k):
    return k.lower()


D_CONTEXTS = [
    lambda p: envfile(p),
    lambda p: "\n".join(f'export {k}="{v}"' for k, v in p),
    lambda p: "env:\n" + "\n".join(f"  - name: {k}\n    value: \"{v}\"" for k, v in p),
    lambda p: R.choice(["credentials:\n", "integrations:\n  vendor:\n", "secrets:\n"]) + "\n".join(
        f"  {lowkey(k)}: {v}" for k, v in p),
    lambda p: json.dumps({**{lowkey(k): v for k, v in p}, "region": R.choice(["us-east-1", "eu-west-1"])}, indent=2),
    lambda p: "\n".join(f"{ts()} DEBUG [config] loaded {k}={v}" for k, v in p),
    lambda p: "\n".join(f'os.environ["{k}"] = "{v}"' for k, v in p),
    lambda p: "\n".join(f"const {k} = process.env.{k} || '{v}';" for k, v in p),
    lambda p: "\n".join(f"ENV {k}={v}" for k, v in p),
    lambda p: "    steps:\n      - run: ./scripts/deploy.sh\n        env:\n" + "\n".join(
        f"          {k}: {v}" for k, v in p),
    lambda p: "\n".join(f'variable "{lowkey(k)}" {{\n  type    = string\n  default = "{v}"\n}}' for k, v in p),
    lambda p: "[auth]\n" + "\n".join(f'{lowkey(k)} = "{v}"' for k, v in p),
    lambda p: "\n".join(f"  {R.randint(100, 1999)}  {k}={v} ./run.sh" for k, v in p),
    lambda p: "docker run --rm " + " ".join(f"-e {k}={v}" for k, v in p) + " acme/worker:2.3.1",
    lambda p: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vendor-creds\ntype: Opaque\nstringData:\n" + "\n".join(
        f"  {k}: {v}" for k, v in p),
    lambda p: "\n".join(f"vendor.{lowkey(k).replace('_', '.')}={v}" for k, v in p),
    lambda p: "```bash\n" + "\n".join(f"export {k}={v}" for k, v in p) + "\n```",
    lambda p: "\n".join(f'os.Setenv("{k}", "{v}")' for k, v in p),
    lambda p: "\n".join(f'Environment.SetEnvironmentVariable("{k}", "{v}");' for k, v in p),
    lambda p: "\n".join(f"%env {k}={v}" for k, v in p),
    lambda p: "Rotated creds for the integration, new values:\n" + "\n".join(f"{k}: {v}" for k, v in p),
    lambda p: "\n".join(f"set {k}={v}" for k, v in p),
    lambda p: "\n".join(f"$env:{k} = \"{v}\"" for k, v in p),
    lambda p: "\n".join(f'config.{lowkey(k)} = "{v}"' for k, v in p),
]

D_SELFID_CONTEXTS = [
    lambda v: f"oops, I committed {v} to the repo in the last push - revoking it now",
    lambda v: f"{ts()} WARN auth failed for token {v}: 401 Unauthorized",
    lambda v: f"Here's the key for the demo: {v}\n(please don't paste it anywhere else)",
    lambda v: f"client = Client(\"{v}\")",
    lambda v: f"requests.exceptions.HTTPError: 403 Client Error: Forbidden (key={v})",
    lambda v: f'{{"name": "ci", "value": "{v}", "created_at": "2024-05-0{R.randint(1, 9)}"}}',
    lambda v: f"> {v}\nis this still valid? the integration started failing yesterday",
]


def gen_vendor_entry(i):
    nm, fn, selfid, special = VENDORS[i % len(VENDORS)]
    vals = fn()
    secrets = [v for _, v, s in vals if s]
    pairs = [(k, v) for k, v, _ in vals]
    roll = R.random()
    if special is not None and roll < 0.3:
        return nm + "/native", special(vals), secrets
    if selfid and len(pairs) == 1 and roll < 0.55:
        return nm + "/prose", R.choice(D_SELFID_CONTEXTS)(pairs[0][1]), secrets
    ci = R.randrange(len(D_CONTEXTS))
    return nm + "/ctx%02d" % ci, D_CONTEXTS[ci](pairs), secrets


# ==========================================================================
# Class E: credentials in URLs, headers, cookies, connection strings

def url_pw():
    """Password as it appears in a URL: sometimes percent-encoded."""
    pw = password()
    enc = urllib.parse.quote(pw, safe="-_.~!*")
    return enc


@gen("E")
def e_url_userinfo():
    pw = url_pw()
    scheme, port, path = R.choice([("postgresql", 5432, "/" + db()), ("postgres", 5432, "/" + db()),
                                   ("mysql", 3306, "/" + db()), ("ftp", 21, "/outgoing/"),
                                   ("sftp", 22, "/upload"), ("smtp", 587, ""), ("https", 443, "/api/v1"),
                                   ("mssql", 1433, "/" + db()), ("clickhouse", 9000, "/default"),
                                   ("ldap", 389, "/dc=corp,dc=lan")])
    h = apihost().split(":")[0] if scheme in ("https", "smtp", "ftp", "sftp", "ldap") else host()
    if scheme == "smtp":
        h = "smtp." + R.choice(["acme.io", "mailgun.org", "office365.com", "corp.lan"])
    url = f"{scheme}://{user()}:{pw}@{h}:{port}{path}"
    fmt = R.choice(["{u}", "DATABASE_URL={u}", "url: {u}", "connecting to {u} ...", '"dsn": "{u}"',
                    "SQLALCHEMY_DATABASE_URI = '{u}'"])
    return fmt.format(u=url), [pw]


@gen("E")
def e_jdbc():
    pw = password(";&")
    fmt = R.choice(["jdbc:mysql://{h}:3306/{d}?user={u}&password={p}&useSSL=true",
                    "jdbc:postgresql://{h}:5432/{d}?user={u}&password={p}&ssl=true",
                    "jdbc:sqlserver://{h}:1433;databaseName={d};user={u};password={p};encrypt=true",
                    "jdbc:oracle:thin:{u}/{p}@{h}:1521/ORCLPDB1",
                    "spring.datasource.url=jdbc:mariadb://{h}/{d}?user={u}&password={p}"])
    if "thin:" in fmt:
        pw = password(";&@/")
    return fmt.format(h=host(), d=db(), u=user(), p=pw), [pw]


@gen("E")
def e_adonet():
    pw = password(";'\"")
    fmt = R.choice(['Server={h};Database={d};User Id={u};Password={p};',
                    'Data Source={h},1433;Initial Catalog={d};User ID={u};Password={p};TrustServerCertificate=True',
                    '"ConnectionStrings": {{ "Default": "Server={h};Database={d};Uid={u};Pwd={p};" }}',
                    'Host={h};Port=5432;Database={d};Username={u};Password={p};SSL Mode=Require',
                    '<add name="Main" connectionString="Data Source={h};Initial Catalog={d};User ID={u};Password={p}" />'])
    return fmt.format(h=host(), d=db(), u=user(), p=pw), [pw]


@gen("E")
def e_mongodb():
    pw = url_pw()
    fmt = R.choice(["mongodb+srv://{u}:{p}@cluster0.{c}.mongodb.net/{d}?retryWrites=true&w=majority",
                    "mongodb://{u}:{p}@mongo-0.mongo:27017,mongo-1.mongo:27017/{d}?replicaSet=rs0&authSource=admin",
                    "MONGO_URL=mongodb://{u}:{p}@{h}:27017/{d}"])
    return fmt.format(u=user(), p=pw, c=rs(LOALNUM, 5), d=db(), h=host()), [pw]


@gen("E")
def e_redis():
    pw = R.choice([url_pw(), rhex(32), rs(ALNUM, 24)])
    fmt = R.choice(["redis://:{p}@{h}:6379/0", "rediss://default:{p}@{h}:6380", "REDIS_URL=redis://:{p}@redis:6379/1",
                    "CELERY_BROKER_URL = 'redis://:{p}@{h}:6379/2'", "cache: redis://:{p}@{h}:6379"])
    return fmt.format(p=pw, h=host()), [pw]


@gen("E")
def e_amqp():
    pw = url_pw()
    fmt = R.choice(["amqp://{u}:{p}@{h}:5672/%2F", "amqps://{u}:{p}@b-{c}.mq.us-east-1.amazonaws.com:5671",
                    "BROKER_URL=amqp://{u}:{p}@rabbitmq:5672/prod", "nats://{u}:{p}@{h}:4222",
                    "kafka://{u}:{p}@{h}:9092"])
    return fmt.format(u=user(), p=pw, h=host(), c=ruuid()), [pw]


@gen("E")
def e_basic_header():
    u, pw = user(), password(":")
    b = base64.b64encode(f"{u}:{pw}".encode()).decode()
    fmt = R.choice(["Authorization: Basic {b}", "-H 'Authorization: Basic {b}'",
                    '"Authorization": "Basic {b}"', "{t} proxy request headers={{'Authorization': 'Basic {b}'}}",
                    "Proxy-Authorization: Basic {b}"])
    return fmt.format(b=b, t=ts()), [b]


@gen("E")
def e_bearer_header():
    t = R.choice([generic_token(), jwt(), "ya29.a0" + rs(B64URL, 150)])
    fmt = R.choice(["Authorization: Bearer {t}", "GET {pa} HTTP/1.1\nHost: {h}\nAuthorization: Bearer {t}\nAccept: */*",
                    "{ts} DEBUG outgoing headers: {{'Authorization': 'Bearer {t}', 'User-Agent': 'python-requests/2.31'}}",
                    "authorization: bearer {t}", '"headers": {{"Authorization": "Bearer {t}"}}'])
    return fmt.format(t=t, pa=R.choice(PATHS), h=apihost(), ts=ts()), [t]


@gen("E")
def e_cookie():
    v = R.choice([rs(B64URL, 32), rhex(64), rs(ALNUM, 40), jwt(), rb64(48)])
    nm = R.choice(["session", "sessionid", "JSESSIONID", "connect.sid", "_gitlab_session", "PHPSESSID",
                   "auth_token", "remember_token", "__Secure-next-auth.session-token"])
    fmt = R.choice(["Cookie: {n}={v}", "Cookie: _ga=GA1.2.{a}.{b}; {n}={v}; theme=dark",
                    "curl -b '{n}={v}' https://{h}/admin", "document.cookie: \"{n}={v}\""])
    return fmt.format(n=nm, v=v, a=digits(9), b=digits(10), h=apihost()), [v]


@gen("E")
def e_set_cookie():
    v = R.choice([rs(B64URL, 43), rhex(48), jwt()])
    nm = R.choice(["session", "sid", "auth", "access_token", "refresh_token", "laravel_session", "_session_id"])
    return f"Set-Cookie: {nm}={v}; Path=/; Expires=Wed, 09 Jun 2027 10:18:14 GMT; Secure; HttpOnly; SameSite=Lax", [v]


@gen("E")
def e_api_key_header():
    t = generic_token()
    hdr = R.choice(["X-API-Key", "X-Api-Key", "x-api-key", "Api-Key", "X-Auth-Token", "X-Access-Token",
                    "PRIVATE-TOKEN", "X-Vault-Token", "apikey", "Ocp-Apim-Subscription-Key"])
    fmt = R.choice(["{h}: {t}", "curl -H '{h}: {t}' https://{host}{pa}", "> {h}: {t}",
                    "headers[\"{h}\"] = \"{t}\""])
    return fmt.format(h=hdr, t=t, host=apihost(), pa=R.choice(PATHS)), [t]


@gen("E")
def e_query_token():
    t = generic_token()
    p = R.choice(["access_token", "api_key", "apikey", "token", "key", "auth", "client_secret", "private_token"])
    fmt = R.choice(["https://{h}{pa}?{p}={t}", "GET {pa}?{p}={t}&format=json 200 12ms",
                    "https://{h}/webhook?{p}={t}&source=github", "{ts} INFO fetch url=https://{h}{pa}?page=2&{p}={t}"])
    return fmt.format(h=apihost(), pa=R.choice(PATHS).split("?")[0], p=p, t=t, ts=ts()), [t]


@gen("E")
def e_sas_token():
    sig = urllib.parse.quote(rb64(32), safe="")
    acct = rs(LOALNUM, 12)
    url = (f"https://{acct}.blob.core.windows.net/{R.choice(['backups', 'exports', 'media'])}/{rs(LOALNUM, 8)}.zip"
           f"?sv=2022-11-02&ss=b&srt=sco&sp=rl&se=2025-0{R.randint(1, 9)}-01T00:00:00Z&st=2024-01-01T00:00:00Z"
           f"&spr=https&sig={sig}")
    return R.choice(["{u}", "SAS_URL={u}", "download from {u}"]).format(u=url), [sig]


@gen("E")
def e_presigned():
    akid = "AKIA" + rs(B32, 16)
    sig = rhex(64)
    url = (f"https://{R.choice(['acme-exports', 'prod-artifacts', 'data-lake-raw'])}.s3.amazonaws.com/{rs(LOALNUM, 10)}.csv"
           f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={akid}%2F2024051{R.randint(0, 9)}%2Fus-east-1%2Fs3%2Faws4_request"
           f"&X-Amz-Date=20240510T101500Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={sig}")
    if R.random() < 0.3:
        tok = rs(B64URL, 200)
        url += f"&X-Amz-Security-Token={tok}"
        return url, [akid, sig, tok]
    return url, [akid, sig]


@gen("E")
def e_url_encoded_bearer():
    raw = rb64(R.choice([32, 48, 60]))
    while not any(c in raw for c in "+/="):
        raw = rb64(R.choice([32, 48, 60]))
    enc = urllib.parse.quote(raw, safe="")
    fmt = R.choice(["https://{h}/callback?Authorization=Bearer%20{e}", "{ts} GET /sso?token={e} 302",
                    "redirect_uri=https%3A%2F%2F{h}%2Fcb&access_token={e}&token_type=bearer",
                    "https://{h}/download?auth=Bearer+{e}"])
    return fmt.format(h=apihost(), e=enc, ts=ts()), [enc]


@gen("E")
def e_git_remote_pat():
    t = R.choice([gh_token("ghp_"), "glpat-" + rs(B64URL, 20), password(URLSAFE)])
    fmt = R.choice(["https://{u}:{t}@github.com/acme/{r}.git", "git clone https://oauth2:{t}@gitlab.corp.lan/{r}.git",
                    "[remote \"origin\"]\n\turl = https://{u}:{t}@bitbucket.org/acme/{r}.git",
                    "pip install git+https://{u}:{t}@github.com/acme/{r}.git@v1.2.0"])
    return fmt.format(u=user(), t=t, r=R.choice(["infra", "billing-api", "ml-models", "website"])), [t]


@gen("E")
def e_proxy_url():
    pw = url_pw()
    fmt = R.choice(["HTTP_PROXY=http://{u}:{p}@proxy.corp.lan:3128", "export https_proxy=http://{u}:{p}@10.0.0.8:8080",
                    "proxy = http://{u}:{p}@squid.dc1:3128", "Acquire::http::Proxy \"http://{u}:{p}@proxy:3128/\";"])
    return fmt.format(u=user(), p=pw), [pw]


@gen("E")
def e_netrc():
    pw = password()
    fmt = R.choice(["machine {h} login {u} password {p}", "machine api.heroku.com\n  login {u}@acme.io\n  password {p}",
                    "default login anonymous password {p}"])
    return fmt.format(h=host(), u=user(), p=pw), [pw]


@gen("E")
def e_webhook_signing():
    t = rs(B64URL, 32)
    fmt = R.choice(["https://{h}/hooks/{t}", "POST https://discord.com/api/webhooks/{id}/{t2}",
                    "WEBHOOK_URL=https://outlook.office.com/webhook/{u}@{u2}/IncomingWebhook/{t3}/{u3}"])
    t2 = rs(B64URL, 68)
    t3 = rhex(32)
    if "discord" in fmt:
        return fmt.format(id=digits(18), t2=t2), [t2]
    if "outlook" in fmt:
        return fmt.format(u=ruuid(), u2=ruuid(), t3=t3, u3=ruuid()), [t3]
    return fmt.format(h=apihost(), t=t), [t]


@gen("E")
def e_ws_and_other_urls():
    t = generic_token()
    fmt = R.choice(["wss://{h}/socket?token={t}", "rtsp://{u}:{p}@192.168.1.64:554/Streaming/Channels/101",
                    "vnc://:{p}@10.0.0.12:5901", "smb://{u}:{p}@fileserver/share"])
    if "{p}" in fmt:
        pw = url_pw()
        return fmt.format(u=user(), p=pw), [pw]
    return fmt.format(h=apihost(), t=t), [t]


# ==========================================================================
# Class F: code constructs and keywords with no label

def codeval():
    return password() if R.random() < 0.6 else generic_token()


@gen("F")
def f_compare():
    v = codeval()
    fmt = R.choice(['if password == "{v}":', 'if (pwd === "{v}") {{ grantAccess(); }}',
                    'if input_pass != "{v}" {{ return Err(AuthError) }}', 'if ($pass == \'{v}\') {{',
                    'assert token == "{v}"', 'if (strcmp(passwd, "{v}") == 0)'])
    return fmt.format(v=v), [v]


@gen("F")
def f_define():
    v = codeval()
    fmt = R.choice(['#define PASSWORD "{v}"', '#define WIFI_PASS "{v}"', '#define API_SECRET "{v}"',
                    'static const char *mqtt_pass = "{v}";', 'const char* AUTH_TOKEN = "{v}";'])
    return fmt.format(v=v), [v]


@gen("F")
def f_py_default_arg():
    v = password()
    fmt = R.choice(['def connect(host: str, user: str = "{u}", passwd: str = "{v}"):',
                    "def login(username, password='{v}'):", 'async def fetch(url, api_key="{v}"):',
                    'def __init__(self, token: str = "{v}") -> None:'])
    return fmt.format(u=user(), v=v), [v]


@gen("F")
def f_kotlin_scala():
    v = codeval()
    fmt = R.choice(['val password: String = "{v}"', 'private val apiKey = "{v}"', 'val dbPass = "{v}"',
                    'var secret: String = "{v}"', 'lazy val token = "{v}"'])
    return fmt.format(v=v), [v]


@gen("F")
def f_go_assign():
    v = codeval()
    fmt = R.choice(['PW:={v}', 'pw := "{v}"', 'token := "{v}"', 'var dbPassword = "{v}"',
                    'const apiSecret = "{v}"'])
    if fmt == "PW:={v}":
        v = password(SH_UNQ)
    return fmt.format(v=v), [v]


@gen("F")
def f_env_like_var():
    v = password(SH_UNQ)
    var = R.choice(["X_PSWD", "DB_PASS", "MYSQL_ROOT_PASSWORD", "ADMIN_PWD", "SMTP_PASSWD", "REDIS_PASS",
                    "LDAP_BIND_PW", "RABBITMQ_DEFAULT_PASS", "POSTGRES_PASSWORD", "KEYSTORE_PASS"])
    fmt = R.choice(["{k}={v}", "{k}='{v}'", 'export {k}="{v}"', "{k}: {v}", "- {k}={v}"])
    return fmt.format(k=var, v=v), [v]


@gen("F")
def f_js_const():
    v = codeval()
    fmt = R.choice(["const secret = '{v}';", "let password = \"{v}\";", "const API_KEY = `{v}`;",
                    "var clientSecret = '{v}';", "export const JWT_SECRET = '{v}';", "this.password = '{v}';"])
    return fmt.format(v=v), [v]


@gen("F")
def f_java_final():
    v = codeval()
    fmt = R.choice(['private static final String API_KEY = "{v}";', 'public static final String DB_PASSWORD = "{v}";',
                    'private String password = "{v}";', 'final String secretKey = "{v}";',
                    'private const string ConnectionPassword = "{v}";', 'public const string ApiToken = "{v}";'])
    return fmt.format(v=v), [v]


@gen("F")
def f_credential_nonce_salt():
    k = R.choice(["credential", "nonce", "salt", "pepper", "passphrase", "signing_key", "hmac_secret", "credentials"])
    v = R.choice([rhex(32), rb64(24), rs(ALNUM, 32), password()])
    fmt = R.choice(['{k} = "{v}"', "{k} = '{v}'", '{k}: "{v}"', 'self.{k} = "{v}"'])
    return fmt.format(k=k, v=v), [v]


@gen("F")
def f_env_fallback_literal():
    v = codeval()
    var = R.choice(["DB_PASSWORD", "API_TOKEN", "SECRET_KEY", "REDIS_PASSWORD", "STRIPE_KEY"])
    fmt = R.choice(['PASSWORD = os.environ.get("{e}") or "{v}"', 'password = os.getenv("{e}", "{v}")',
                    'secret := getenv("{e}", "{v}")', "const token = process.env.{e} ?? '{v}';",
                    'String pw = System.getenv().getOrDefault("{e}", "{v}");',
                    'password = ENV.fetch("{e}", "{v}")', "$password = getenv('{e}') ?: '{v}';"])
    return fmt.format(e=var, v=v), [v]


@gen("F")
def f_setter():
    v = password()
    fmt = R.choice(['dataSource.setPassword("{v}");', 'config.setPassword("{v}")', 'cfg.SetPassword("{v}")',
                    'builder.password("{v}")', 'props.setProperty("password", "{v}");',
                    'conn.set_password("{v}")', 'client.setApiKey("{v}");'])
    return fmt.format(v=v), [v]


@gen("F")
def f_escaped_json_in_string():
    v = password()
    u = user()
    fmt = R.choice(['body := "{{\\"username\\":\\"{u}\\",\\"password\\":\\"{v}\\"}}"',
                    'payload = "{{\\"user\\": \\"{u}\\", \\"password\\": \\"{v}\\"}}"',
                    'String json = "{{\\"login\\":\\"{u}\\",\\"pass\\":\\"{v}\\"}}";',
                    "curl -d '{{\"username\":\"{u}\",\"password\":\"{v}\"}}' https://{h}/login"])
    return fmt.format(u=u, v=v, h=apihost()), [v]


@gen("F")
def f_yaml_nested():
    v = password(":#")
    fmt = R.choice([
        "spring:\n  datasource:\n    url: jdbc:postgresql://{h}/{d}\n    username: {u}\n    password: {v}",
        "database:\n  production:\n    adapter: postgresql\n    host: {h}\n    password: \"{v}\"",
        "services:\n  db:\n    image: postgres:16\n    environment:\n      POSTGRES_USER: {u}\n      POSTGRES_PASSWORD: {v}",
        "auth:\n  ldap:\n    bind_dn: cn={u},dc=corp,dc=lan\n    bind_password: '{v}'",
        "smtp:\n  host: smtp.{h}\n  user: {u}\n  pass: {v}"])
    return fmt.format(h=host(), d=db(), u=user(), v=v), [v]


@gen("F")
def f_dotenv():
    secs, lines = [], []
    for k in R.sample(["DB_PASSWORD", "SECRET_KEY", "JWT_SECRET", "SESSION_SECRET", "MAIL_PASSWORD",
                       "ENCRYPTION_KEY", "APP_KEY", "ADMIN_PASSWORD"], R.randint(1, 3)):
        v = password(SH_UNQ) if "PASS" in k else (("base64:" + rb64(32)) if k == "APP_KEY" else generic_token())
        secs.append(v)
        lines.append(f"{k}={v}")
    lines.insert(0, R.choice(["APP_ENV=production", "DEBUG=false", "DB_HOST=" + host(), "APP_URL=https://app.acme.io"]))
    return "\n".join(lines), secs


@gen("F")
def f_go_struct():
    v = password()
    fmt = R.choice(['cfg := mysql.Config{{\n\tUser:   "{u}",\n\tPasswd: "{v}",\n\tNet:    "tcp",\n\tAddr:   "{h}:3306",\n}}',
                    'opts := &redis.Options{{\n\tAddr:     "{h}:6379",\n\tPassword: "{v}",\n\tDB:       0,\n}}',
                    'creds := Credentials{{Username: "{u}", Password: "{v}"}}'])
    return fmt.format(u=user(), v=v, h=host()), [v]


@gen("F")
def f_php_array():
    v = password()
    fmt = R.choice(["'password' => '{v}',", "'db_pass' => \"{v}\",", "$config['smtp_pass'] = '{v}';",
                    "define('DB_PASSWORD', '{v}');", "'secret' => '{v}',"])
    return fmt.format(v=v), [v]


@gen("F")
def f_ruby():
    v = password()
    fmt = R.choice(["password: '{v}'", "config.password = '{v}'", "  password: \"{v}\",",
                    "ActiveRecord::Base.establish_connection(adapter: 'mysql2', username: '{u}', password: '{v}')",
                    "user.update!(password: '{v}')"])
    return fmt.format(v=v, u=user()), [v]


@gen("F")
def f_rust_swift():
    v = codeval()
    fmt = R.choice(['let password = "{v}";', 'let api_key: &str = "{v}";', 'const DB_PASS: &str = "{v}";',
                    'let apiSecret = "{v}"', 'static let token = "{v}"'])
    return fmt.format(v=v), [v]


@gen("F")
def f_powershell_shell():
    v = password("$`\"'")
    fmt = R.choice(['$password = "{v}"', "$Pwd = '{v}'", 'DB_PASS="{v}"', "read_pw='{v}'", '$ApiKey = "{v}"'])
    return fmt.format(v=v), [v]


@gen("F")
def f_ini_xml_props():
    v = password("<>&")
    fmt = R.choice(["[database]\nhost = {h}\nuser = {u}\npassword = {v}", "<password>{v}</password>",
                    '<add key="SmtpPassword" value="{v}" />', "spring.datasource.password={v}",
                    "[client]\nuser={u}\npassword={v}", "<property name=\"hibernate.connection.password\">{v}</property>"])
    return fmt.format(h=host(), u=user(), v=v), [v]


@gen("F")
def f_terraform_helm():
    v = password()
    fmt = R.choice(['  master_password = "{v}"', '  administrator_login_password = "{v}"',
                    "postgresql:\n  auth:\n    password: {v}", 'resource "aws_db_instance" "main" {{\n  username = "{u}"\n  password = "{v}"\n}}'])
    if "postgresql:" in fmt:
        v = password(":#")
    return fmt.format(v=v, u=user()), [v]


@gen("F")
def f_pgpass():
    v = password(":")
    return f"{host()}:5432:{db()}:{user()}:{v}", [v]


@gen("F")
def f_dict_literal():
    v = password()
    fmt = R.choice(['DATABASES = {{"default": {{"NAME": "{d}", "USER": "{u}", "PASSWORD": "{v}"}}}}',
                    "creds = {{'user': '{u}', 'pwd': '{v}'}}", 'conf = {{ "login": "{u}", "passwd": "{v}" }}',
                    "{{ \"username\": \"{u}\", \"password\": \"{v}\" }}"])
    return fmt.format(d=db(), u=user(), v=v), [v]


# ==========================================================================
# Class G: private keys

def _der_rand(prefix_hex, total):
    while True:
        b = bytes.fromhex(prefix_hex) + R.randbytes(total - len(prefix_hex) // 2)
        s = base64.b64encode(b).decode()
        if ok(s):
            return s


def wrap(s, n=64):
    return [s[i:i + n] for i in range(0, len(s), n)]


def key_rsa():
    return "RSA PRIVATE KEY", wrap(_der_rand("308204a40201000282010100", 1192))


def key_ec():
    body = ("30770201010420" + R.randbytes(32).hex() + "a00a06082a8648ce3d030107a14403420004" + R.randbytes(64).hex())
    s = base64.b64encode(bytes.fromhex(body)).decode()
    return "EC PRIVATE KEY", wrap(s)


def key_pkcs8():
    if R.random() < 0.7:
        return "PRIVATE KEY", wrap(_der_rand("308204be020100300d06092a864886f70d0101010500048204a8", 1218))
    s = base64.b64encode(bytes.fromhex("302e020100300506032b657004220420") + R.randbytes(32)).decode()
    return "PRIVATE KEY", [s]


def key_dsa():
    return "DSA PRIVATE KEY", wrap(_der_rand("308201bb02818100", 447))


def _sshstr(b):
    return struct.pack(">I", len(b)) + b


def key_openssh():
    pub, seed = R.randbytes(32), R.randbytes(32)
    pubblob = _sshstr(b"ssh-ed25519") + _sshstr(pub)
    chk = R.randbytes(4)
    comment = f"{user()}@{R.choice(['laptop', 'build-01', 'bastion', 'macbook.local'])}".encode()
    priv = chk + chk + _sshstr(b"ssh-ed25519") + _sshstr(pub) + _sshstr(seed + pub) + _sshstr(comment)
    pad = 1
    while len(priv) % 8:
        priv += bytes([pad])
        pad += 1
    blob = (b"openssh-key-v1\0" + _sshstr(b"none") + _sshstr(b"none") + _sshstr(b"") +
            struct.pack(">I", 1) + _sshstr(pubblob) + _sshstr(priv))
    return "OPENSSH PRIVATE KEY", wrap(base64.b64encode(blob).decode(), 70)


def crc24(data):
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def key_pgp():
    raw = bytes([0x95, 0x03, 0xC6, 0x04]) + R.randbytes(4) + bytes([0x01, 0x08, 0x00]) + R.randbytes(R.randint(440, 900))
    s = base64.b64encode(raw).decode()
    cks = "=" + base64.b64encode(struct.pack(">I", crc24(raw))[1:]).decode()
    return "PGP PRIVATE KEY BLOCK", wrap(s), cks


def any_key(kinds=("rsa", "rsa", "ec", "pkcs8", "pkcs8", "openssh", "dsa", "ec")):
    k = R.choice(kinds)
    return {"rsa": key_rsa, "ec": key_ec, "pkcs8": key_pkcs8, "openssh": key_openssh, "dsa": key_dsa}[k]()


def pem(label, lines, header=""):
    return f"-----BEGIN {label}-----\n{header}" + "\n".join(lines) + f"\n-----END {label}-----"


@gen("G")
def g_plain_pem():
    label, lines = any_key()
    pre = R.choice(["", "$ cat ~/.ssh/id_deploy\n", "key.pem:\n", "Here's the server key, install it on the new box:\n\n"])
    return pre + pem(label, lines), lines


@gen("G")
def g_pgp():
    label, lines, cks = key_pgp()
    text = f"-----BEGIN {label}-----\nComment: exported for the release signing box\n\n" + "\n".join(lines) + f"\n{cks}\n-----END {label}-----"
    return text, lines


@gen("G")
def g_encrypted_pem():
    label, lines = key_rsa()
    hdr = f"Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{rs(UHEX, 32)}\n\n"
    return pem(label, lines, hdr), lines


@gen("G")
def g_code_concat():
    label, lines = any_key(("rsa", "ec", "pkcs8", "ec"))
    lang = R.choice(["java", "js", "py", "cs"])
    end = f"-----END {label}-----"
    parts = [f'"-----BEGIN {label}-----\\n"'] + [f'"{l}\\n"' for l in lines] + [f'"{end}"']
    if lang == "py":
        body = "PRIVATE_KEY = (\n" + "\n".join("    " + p for p in parts) + "\n)"
    else:
        decl = {"java": "private static final String PRIVATE_KEY =", "js": "const privateKey =",
                "cs": "private const string PrivateKey ="}[lang]
        body = decl + "\n" + " +\n".join("    " + p for p in parts) + ";"
    return body, lines + [end]


@gen("G")
def g_log_prefix():
    label, lines = any_key(("rsa", "ec", "pkcs8", "openssh"))
    pfx = R.choice(["2024-01-01 INFO | ", "Jan 12 03:44:10 web-3 app[2211]: ", "[worker-2] DEBUG ",
                    "2024-06-09T14:22:10.004Z stdout F ", "build  | "])
    all_lines = [f"-----BEGIN {label}-----"] + lines + [f"-----END {label}-----"]
    head = f"{pfx}loaded signing key from env:\n"
    return head + "\n".join(pfx + l for l in all_lines), lines


@gen("G")
def g_json_escaped():
    label, lines = key_pkcs8()
    pk = f"-----BEGIN {label}-----\\n" + "\\n".join(lines) + f"\\n-----END {label}-----\\n"
    proj = R.choice(["acme-prod", "data-platform-31", "billing-4471", "ml-sandbox"])
    text = ("{\n  \"type\": \"service_account\",\n"
            f"  \"project_id\": \"{proj}\",\n  \"private_key_id\": \"{rhex(40)}\",\n"
            f"  \"private_key\": \"{pk}\",\n"
            f"  \"client_email\": \"deployer@{proj}.iam.gserviceaccount.com\",\n"
            f"  \"client_id\": \"{digits(21)}\",\n  \"token_uri\": \"https://oauth2.googleapis.com/token\"\n}}")
    return text, lines


@gen("G")
def g_env_escaped():
    label, lines = any_key(("rsa", "ec", "pkcs8"))
    pk = f"-----BEGIN {label}-----\\n" + "\\n".join(lines) + f"\\n-----END {label}-----"
    var = R.choice(["PRIVATE_KEY", "JWT_PRIVATE_KEY", "GITHUB_APP_PRIVATE_KEY", "SAML_SP_KEY", "APNS_KEY"])
    return f'{var}="{pk}"', lines


@gen("G")
def g_kubeconfig_b64():
    label, lines = any_key(("rsa", "ec"))
    blob = base64.b64encode((pem(label, lines) + "\n").encode()).decode()
    fmt = R.choice([
        "users:\n- name: admin@prod\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {b}",
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {cert}\n  tls.key: {b}",
        "KEY_B64={b}"])
    cert = base64.b64encode(("-----BEGIN CERTIFICATE-----\n" + "\n".join(wrap(rb64(600))) + "\n-----END CERTIFICATE-----\n").encode()).decode()
    return fmt.format(b=blob, cert=cert), [blob]


def putty(ver):
    pub = base64.b64encode(_sshstr(b"ssh-rsa") + _sshstr(b"\x01\x00\x01") + _sshstr(b"\x00" + R.randbytes(256))).decode()
    priv = base64.b64encode(R.randbytes(R.randint(640, 660))).decode()
    plines, qlines = wrap(pub), wrap(priv)
    mac = rhex(64 if ver == 3 else 40)
    text = (f"PuTTY-User-Key-File-{ver}: ssh-rsa\nEncryption: none\nComment: rsa-key-2024{R.randint(1, 12):02d}{R.randint(10, 28)}\n"
            f"Public-Lines: {len(plines)}\n" + "\n".join(plines) + f"\nPrivate-Lines: {len(qlines)}\n" +
            "\n".join(qlines) + f"\nPrivate-MAC: {mac}")
    return text, qlines


@gen("G")
def g_putty():
    return putty(R.choice([2, 2, 3]))


@gen("G")
def g_python_triple():
    label, lines = any_key(("rsa", "ec", "openssh", "pkcs8"))
    var = R.choice(["SSH_KEY", "private_key", "SIGNING_KEY", "TEST_KEY"])
    return f'{var} = """{pem(label, lines)}\n"""', lines


@gen("G")
def g_yaml_block():
    label, lines = any_key(("rsa", "ec", "pkcs8"))
    ind = "    "
    blk = "\n".join(ind + l for l in pem(label, lines).split("\n"))
    key = R.choice(["tls.key", "ssh_private_key", "privateKey", "deploy_key", "signing_key"])
    return f"{R.choice(['stringData', 'secrets', 'vars'])}:\n  {key}: |\n{blk}", lines


@gen("G")
def g_terraform_heredoc():
    label, lines = any_key(("rsa", "ec", "openssh"))
    return f'resource "tls_locally_signed_cert" "x" {{\n  ca_private_key_pem = <<EOT\n{pem(label, lines)}\nEOT\n}}', lines


@gen("G")
def g_cert_and_key_bundle():
    label, lines = any_key(("rsa", "ec", "pkcs8"))
    cert = wrap(base64.b64encode(bytes.fromhex("308203c5308202ada003020102021400") + R.randbytes(950)).decode())
    text = "-----BEGIN CERTIFICATE-----\n" + "\n".join(cert) + "\n-----END CERTIFICATE-----\n" + pem(label, lines)
    if R.random() < 0.5:
        text = pem(label, lines) + "\n" + "-----BEGIN CERTIFICATE-----\n" + "\n".join(cert) + "\n-----END CERTIFICATE-----"
    return text, lines


@gen("G")
def g_chat_paste():
    label, lines = any_key(("ec", "openssh", "pkcs8", "rsa"))
    return (f"{name()}: can you check why this key doesn't work?\n```\n{pem(label, lines)}\n```\n"
            f"{name()}: pls don't paste keys in slack"), lines


@gen("G")
def g_java_single_literal():
    label, lines = any_key(("ec", "pkcs8"))
    pk = f"-----BEGIN {label}-----\\n" + "\\n".join(lines) + f"\\n-----END {label}-----"
    fmt = R.choice(['String pem = "{k}";', 'const KEY = "{k}";', 'key := "{k}"', "private_key: \"{k}\""])
    return fmt.format(k=pk), lines


@gen("G")
def g_openssh_file():
    label, lines = key_openssh()
    return f"$ cat ~/.ssh/id_ed25519\n{pem(label, lines)}", lines


@gen("G")
def g_gha_secret_echo():
    label, lines = any_key(("rsa", "ec", "openssh"))
    fmt = "      - name: Setup key\n        run: |\n          cat > ~/.ssh/id <<'KEY'\n{blk}\n          KEY\n          chmod 600 ~/.ssh/id"
    blk = "\n".join("          " + l for l in pem(label, lines).split("\n"))
    return fmt.format(blk=blk), lines


@gen("G")
def g_raw_body_b64():
    label, lines = any_key(("rsa", "ec", "pkcs8"))
    body = "".join(lines)
    fmt = R.choice(['"privateKey": "{b}"', "SIGNING_KEY_DER={b}", "private_key_b64: {b}"])
    return fmt.format(b=body), [body]


# ==========================================================================
# Class N: negatives (no credential at all)

def sha1():
    return rs(HEX, 40)


def sha256():
    return rs(HEX, 64)


@gen("N")
def n_fake_github():
    v = R.choice(["ghp_1234567890abcdefghijklmnopqrstuvwxyz", "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                  "ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX", "ghp_000000000000000000000000000000000000",
                  "github_pat_XXXXXXXXXXXXXXXXXXXXXX_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
                  "ghp_EXAMPLE1234567890EXAMPLE1234567890", "gho_" + "x" * 36,
                  "ghp_abcdefghijklmnopqrstuvwxyz0123456789"])
    fmt = R.choice(["GITHUB_TOKEN={v}  # replace with your token", "e.g. `export GH_TOKEN={v}`",
                    "token: {v}   # placeholder", "Set `GITHUB_TOKEN` to a personal access token (looks like `{v}`)."])
    return fmt.format(v=v)


@gen("N")
def n_fake_aws():
    fmt = R.choice(["aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                    "AWS_ACCESS_KEY_ID=AKIAI44QH8DHBEXAMPLE\nAWS_SECRET_ACCESS_KEY=je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
                    "Example: `aws configure` then enter AKIAIOSFODNN7EXAMPLE when prompted.",
                    "access key: AKIAXXXXXXXXXXXXXXXX\nsecret key: XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
                    "\"AccessKeyId\": \"ASIAIOSFODNN7EXAMPLE\""])
    return fmt


@gen("N")
def n_fake_sk():
    v = R.choice(["sk-proj-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "sk-...tokenexample", "sk-your-key-here",
                  "sk-ant-api03-XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX", "sk-proj-EXAMPLEKEY1234567890EXAMPLE",
                  "sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "sk-abc123...", "sk-...", "sk-proj-****"])
    fmt = R.choice(['OPENAI_API_KEY="{v}"', "Paste your key ({v}) into the settings dialog.",
                    "api_key = \"{v}\"  # put your own key here", "ANTHROPIC_API_KEY={v}"])
    return fmt.format(v=v)


@gen("N")
def n_fake_stripe():
    v = R.choice(["sk_test_XXXXXXXXXXXXXXXXXXXXXXXX", "sk_live_EXAMPLEKEYEXAMPLEKEY000000", "sk_test_" + "0" * 24,
                  "sk_test_aaaaaaaaaaaaaaaaaaaaaaaa", "rk_live_xxxxxxxxxxxxxxxxxxxxxxxx", "sk_test_...",
                  "sk_test_EXAMPLE_KEY_REPLACE_ME", "sk_live_" + "X" * 24])
    fmt = R.choice(["stripe.api_key = \"{v}\"", "STRIPE_SECRET_KEY={v}", "Use your test key (for example {v}).",
                    "Stripe.apiKey = '{v}';"])
    return fmt.format(v=v)


@gen("N")
def n_filler_values():
    k = R.choice(["token", "api_key", "secret", "password", "apiKey", "client_secret", "auth_token"])
    v = R.choice(["abcdef12345", "1234567890", "9876543210", "xxxxxxxx", "XXXXXXXXXXXX", "abcdef",
                  "0123456789abcdef", "aaaaaaaaaaaaaaaa", "foo", "foobar", "76543210", "1234567890abcdef",
                  "0000000000000000", "password", "secret", "ABCDEFGHIJKLMNOP", "xxxx-xxxx-xxxx"])
    fmt = R.choice(["{k}: {v}", "{k}={v}", '"{k}": "{v}"', "{k} = '{v}'"])
    return fmt.format(k=k, v=v) + R.choice(["", "  # dummy value for tests", "  // sample"])


@gen("N")
def n_fake_slack_and_others():
    return R.choice([
        "SLACK_BOT_TOKEN=xoxb-XXXXXXXXXXXX-XXXXXXXXXXXXX-XXXXXXXXXXXXXXXXXXXXXXXX",
        "webhook_url: https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "NPM_TOKEN=npm_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
        "SENDGRID_API_KEY=SG.xxxxxxxxxxxxxxxxxxxxxx.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "HF_TOKEN=hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "glpat-xxxxxxxxxxxxxxxxxxxx is the format of a GitLab personal access token",
        "DIGITALOCEAN_TOKEN=dop_v1_EXAMPLE",
        "TWILIO_AUTH_TOKEN=your_auth_token",
        "export VAULT_TOKEN=hvs.EXAMPLE",
        "Bot tokens look like `123456789:AAxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx`.",
        "DATABRICKS_TOKEN=dapiXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
        "key-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx  <- Mailgun private key goes here"])


@gen("N")
def n_angle_placeholders():
    k = R.choice(["password", "pw", "pass", "token", "api_key", "secret", "PASSWORD", "client_secret"])
    v = R.choice(["<your-password>", "<password>", "<PASSWORD>", "[password]", "{password}", "<your_token_here>",
                  "<YOUR_API_KEY>", "<secret>", "<insert token>", "YOUR_PASSWORD_HERE", "your-api-key",
                  "<redacted>", "<db-password>", "REPLACE_WITH_YOUR_KEY"])
    fmt = R.choice(["{k}: {v}", "{k}={v}", "--{k} {v}", '"{k}": "{v}"', "{k} = \"{v}\""])
    return fmt.format(k=k, v=v)


@gen("N")
def n_env_refs():
    fmt = R.choice(["password=${DB_PASSWORD}", "PGPASSWORD=$DB_PASS psql -h db -U app", "pw: ${PW}",
                    "password: \"${POSTGRES_PASSWORD}\"", "set PASSWORD=%DB_PASSWORD%",
                    "token=$(cat /run/secrets/api_token)", "API_KEY=${API_KEY:?must be set}",
                    "password: ${{ secrets.DB_PASSWORD }}", "auth_token = ENV['AUTH_TOKEN']",
                    "secret: ${env:CLIENT_SECRET}", "password = \"%(db_password)s\"",
                    "DATABASE_URL=postgres://${DB_USER}:${DB_PASS}@${DB_HOST}:5432/${DB_NAME}"])
    return fmt


@gen("N")
def n_cli_vars():
    return R.choice(["mysql -u root --password $PASS app", "docker login -u $REG_USER -p \"$REG_PASS\" ghcr.io",
                     "./deploy.sh --token \"${GITHUB_TOKEN}\"", "curl -u \"$USER:$PASS\" https://api.internal/health",
                     "sshpass -e ssh deploy@bastion", "echo \"$CR_PAT\" | docker login ghcr.io -u bot --password-stdin",
                     "mysql -u root -p", "psql -h db.internal -p 5432 -U app -d orders",
                     "vault kv get -field=password secret/prod/db", "--password-file /run/secrets/db_password",
                     "op read op://Infra/postgres/password", "aws secretsmanager get-secret-value --secret-id prod/db",
                     "kubectl create secret generic db --from-file=password=./password.txt",
                     "gh auth login --with-token < token.txt", "redis-cli -h cache -p 6379 ping",
                     "htpasswd -c /etc/nginx/.htpasswd admin", "sshpass -f ~/.ssh/pw.txt ssh ops@host"])


@gen("N")
def n_templating():
    return R.choice(["token: {{ .Values.token }}", "password: \"{{ vault_db_password }}\"",
                     "api_key: {{ secrets.API_KEY }}", "secret: '{{ lookup(\"env\", \"SECRET\") }}'",
                     "password: <%= ENV['DB_PASSWORD'] %>", "token: {{ required \"token is required\" .Values.auth.token }}",
                     "password: !Ref DbPassword", "MasterUserPassword: !Sub '{{resolve:secretsmanager:${DbSecret}:SecretString:password}}'",
                     "password: ((db_password))", "apiKey: $(API_KEY)", "password: #{DB_PASSWORD}",
                     "value: \"{{ .Env.TOKEN }}\""])


@gen("N")
def n_weak_words():
    k = R.choice(["password", "Password", "PASSWORD", "pw", "admin_password", "db_password"])
    v = R.choice(["changeme", "change_me", "CHANGEME", "replace-me", "REPLACE_ME", "TODO", "insert-password-here",
                  "please-change", "change-this", "CHANGE_ME_IN_PROD", "set-me", "tbd"])
    fmt = R.choice(["{k}: {v}", "{k}={v}", '{k} = "{v}"', '"{k}": "{v}"'])
    return fmt.format(k=k, v=v) + R.choice(["", "  # override in production", ""])


@gen("N")
def n_masked():
    k = R.choice(["password", "pwd", "token", "secret", "Authorization", "api_key", "pass"])
    v = R.choice(["********", "***", "[REDACTED]", "<redacted>", "••••••••", "(hidden)", "[FILTERED]", "*****",
                  "[MASKED]", "REDACTED", "<hidden>", "xxxxx"])
    fmt = R.choice(["{k}: {v}", "{k}={v}", "{t} INFO login ok user=bob {k}={v}", '"{k}": "{v}"'])
    return fmt.format(k=k, v=v, t=ts())


@gen("N")
def n_openapi_string():
    return R.choice(['{\n  "username": "string",\n  "password": "string"\n}', '"SecretApiKey": "string"',
                     'password:\n  type: string\n  format: password\n  minLength: 8',
                     '{"clientId": "string", "clientSecret": "string"}',
                     'token:\n  type: string\n  description: Bearer token returned by /auth/login',
                     '"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}'])


@gen("N")
def n_type_annotations():
    return R.choice(["password: String", "password: str", "passwd: Optional[str] = None", "api_key: null",
                     "token: ~", 'secret: ""', "password: undefined", "private String password;",
                     "Password string `json:\"password\"`", "pub password: Option<String>,",
                     "password?: string;", "var password: String? = nil", "string Password { get; set; }",
                     "password = None", "token = ''", "API_KEY=", "client_secret: !!null"])


@gen("N")
def n_env_lookup():
    return R.choice(['password = os.environ["DB_PASSWORD"]', 'password = os.getenv("DB_PASSWORD")',
                     'String pw = System.getenv("DB_PASSWORD");', "const token = process.env.API_TOKEN;",
                     'token = ENV.fetch("API_TOKEN")', 'pass := os.Getenv("DB_PASS")',
                     'secret = settings.SECRET_KEY', 'viper.GetString("database.password")',
                     'password = config["db"]["password"]', 'key = keyring.get_password("svc", "bob")',
                     "$password = $_ENV['DB_PASSWORD'];", 'let token = std::env::var("TOKEN")?;',
                     'secret = vault_client.secrets.kv.read_secret_version(path="db")["data"]["data"]["password"]'])


@gen("N")
def n_getpass():
    return R.choice(["password = getpass()", 'pw = getpass.getpass("Password: ")', 'token = input("Enter token: ")',
                     'read -s -p "Password: " PASSWORD', "$pw = Read-Host -AsSecureString 'Password'",
                     "password = click.prompt('Password', hide_input=True)", "pass = prompt.Password()",
                     "char *pw = getpass(\"Password: \");"])


@gen("N")
def n_request_headers():
    return R.choice(['token = request.headers.get("X-Token")', "const auth = req.headers['authorization'];",
                     'apiKey := r.Header.Get("X-Api-Key")', 'token = self.request.cookies.get("session")',
                     'String token = request.getHeader("Authorization");', 'password = request.form["password"]',
                     "$pass = $_POST['password'];", "password = params[:password]"])


@gen("N")
def n_prose_policy():
    return R.choice(["The password field must be at least 8 characters.",
                     "Passwords must contain an uppercase letter, a digit and a symbol.",
                     "Your password expires every 90 days.",
                     "Error: password is required",
                     "Invalid username or password. Please try again.",
                     "Password must not match any of your last 5 passwords.",
                     "The token expires after 15 minutes of inactivity.",
                     "API keys are shown only once; store them in a password manager."]) + R.choice(["", " (see SEC-101)", ""])


@gen("N")
def n_reset_email():
    n = name()
    return (f"Hi {n},\n\nWe received a request to reset your password. Click the link below to choose a new one. "
            f"The link expires in {R.choice([15, 30, 60])} minutes.\n\nIf you didn't ask for this, ignore this email.\n\n"
            f"- The {R.choice(['Acme', 'Northwind', 'Bluefin'])} team")


@gen("N")
def n_test_output():
    a = R.randint(5, 300)
    b = R.randint(0, a)
    return R.choice([f"pass: {b} of {a} tests", f"PASS: test_login ({R.randint(1, 99) / 100}s)",
                     f"Tests: {b} passed, {a - b} failed, {a} total", f"pass rate {R.randint(60, 100)}%",
                     f"ok {R.randint(1, 40)} - password reset sends email", f"PASS src/auth/token.test.ts ({R.randint(1, 9)}.{R.randint(10, 99)} s)",
                     f"--- PASS: TestTokenRefresh ({R.randint(0, 3)}.{R.randint(10, 99)}s)",
                     f"first pass: {b} files, second pass: {a} files"])


@gen("N")
def n_identified_by():
    return R.choice(["The regression was identified by the team during the release review.",
                     "Users are identified by their email address.",
                     "Each device is identified by its serial number.",
                     "The issue was identified by QA on Tuesday.",
                     "CREATE USER 'app'@'localhost' IDENTIFIED WITH auth_socket;",
                     "ALTER USER bob PASSWORD EXPIRE;", "CREATE ROLE readonly NOLOGIN;",
                     "CREATE USER ops_ro IDENTIFIED EXTERNALLY;", "ALTER ROLE app PASSWORD NULL;",
                     "CREATE USER app IDENTIFIED BY :new_password;", "ALTER USER ? IDENTIFIED BY ?",
                     "CREATE USER app WITH PASSWORD :'pw';", "SET PASSWORD FOR 'app'@'%' = PASSWORD(@new_pw);"])


@gen("N")
def n_cli_docs():
    return R.choice(["The --password option is deprecated; use --password-stdin.",
                     "  -p, --password[=name]  Password to use when connecting to server.",
                     "Use --token to pass a token on the command line (not recommended).",
                     "  --api-key string   API key (env: ACME_API_KEY)",
                     "--client-secret CLIENT_SECRET\n    OAuth client secret; defaults to $CLIENT_SECRET",
                     "WARNING! Using --password via the CLI is insecure. Use --password-stdin.",
                     "sshpass -p is unsafe because the password shows up in ps output."])


@gen("N")
def n_key_value_prose():
    return R.choice(["Each line holds key: value pairs separated by commas.",
                     "token: see vault", "password: ask Dana", "pw: in 1Password (Shared-Infra vault)",
                     "secret: stored in AWS Secrets Manager under prod/db", "key: value",
                     "api key: request one from the platform team", "password: same as staging (in the vault)",
                     "token: rotate quarterly", "The secret to good bread is patience.",
                     "Secret Santa list is pinned in #random", "key: the primary key of the row"])


@gen("N")
def n_git_shas():
    s = sha1()
    return R.choice([f"commit {s}\nAuthor: {name()} <{name().lower()}@acme.io>\nDate:   Tue May 14 10:02:11 2024 +0200\n\n    fix: handle empty token list",
                     f"      - uses: actions/checkout@{s} # v4.1.1",
                     f"https://github.com/acme/infra/commit/{s}",
                     f"Reverts {s}", f"git cherry-pick {s[:7]}", f"HEAD is now at {s[:7]} bump deps",
                     f"rev = \"{s}\"", f"{s} refs/heads/main"])


@gen("N")
def n_hashes():
    h = sha256()
    return R.choice([f"{h}  release-2.4.1.tar.gz", f"sha256: {h}", f"SHA512 ({rs(LOALNUM, 8)}.iso) = {rs(HEX, 128)}",
                     f'checksum = "{h}"', f"Digest: sha256:{h}", f"  sha256 \"{h}\"",
                     f"etag: \"{rs(HEX, 32)}\"", f"md5sum: {rs(HEX, 32)}"])


@gen("N")
def n_uuids():
    return R.choice([f"X-Request-Id: {ruuid()}", f"trace_id={rs(HEX, 32)} span_id={rs(HEX, 16)}",
                     f'"id": "{ruuid()}"', f"Order {ruuid()} shipped", f"AZURE_TENANT_ID={ruuid()}",
                     f"subscription: {ruuid()}", f"correlationId: {ruuid()}", f"<ProjectGuid>{{{ruuid().upper()}}}</ProjectGuid>"])


@gen("N")
def n_integrity():
    return R.choice([f'"integrity": "sha512-{rb64(64)}"', f'integrity="sha384-{rb64(48)}"',
                     f"<script src=\"https://cdn.jsdelivr.net/npm/bootstrap@5.3.3/dist/js/bootstrap.min.js\" integrity=\"sha384-{rb64(48)}\" crossorigin=\"anonymous\"></script>",
                     f"  resolved \"https://registry.yarnpkg.com/lodash/-/lodash-4.17.21.tgz#{sha1()}\"\n  integrity sha512-{rb64(64)}"])


@gen("N")
def n_go_sum():
    mod = R.choice(["github.com/spf13/cobra v1.8.0", "golang.org/x/crypto v0.21.0", "github.com/stretchr/testify v1.9.0",
                    "google.golang.org/grpc v1.62.1", "github.com/google/uuid v1.6.0"])
    return R.choice([f"{mod} h1:{rb64(32)}", f"{mod}/go.mod h1:{rb64(32)}"])


@gen("N")
def n_docker_digest():
    h = sha256()
    return R.choice([f"image: nginx@sha256:{h}", f"FROM python:3.12-slim@sha256:{h}",
                     f"docker pull ghcr.io/acme/api@sha256:{h}", f"Status: Downloaded newer image\nDigest: sha256:{h}",
                     f'"ImageID": "sha256:{h}"'])


@gen("N")
def n_paths():
    return R.choice(["/usr/lib/x86_64-linux-gnu/libQt5Core.so.5.15.2", r"C:\Program Files (x86)\Microsoft Visual Studio\2019\BuildTools\MSBuild\Current\Bin\MSBuild.exe",
                     "src/main/java/com/acme/billing/service/impl/InvoiceReconciliationServiceImpl.java",
                     "node_modules/@babel/plugin-transform-async-generator-functions/lib/index.js",
                     "/var/lib/docker/overlay2/" + sha256() + "/merged",
                     r"%APPDATA%\Microsoft\Windows\Start Menu\Programs\Startup",
                     "com.fasterxml.jackson.databind.deser.std.StdDeserializer",
                     "/home/runner/work/_temp/_runner_file_commands/set_env_" + ruuid(),
                     "~/.cache/pip/wheels/" + rs(HEX, 2) + "/" + rs(HEX, 2) + "/" + rs(HEX, 60),
                     "/opt/homebrew/Cellar/openssl@3/3.2.1/lib/libcrypto.3.dylib"])


@gen("N")
def n_xml_ns():
    return R.choice(['xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"',
                     '<project xmlns="http://maven.apache.org/POM/4.0.0" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 https://maven.apache.org/xsd/maven-4.0.0.xsd">',
                     '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" viewBox="0 0 24 24">',
                     '<beans xmlns:context="http://www.springframework.org/schema/context">',
                     '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">'])


@gen("N")
def n_camel_identifiers():
    return R.choice(["AbstractSingletonProxyFactoryBean", "XmlHttpRequestAuthenticationEntryPointConfigurer",
                     "PasswordResetTokenRepositoryImplementation", "SimpleBeanFactoryAwareAspectInstanceFactory",
                     "InternalFrameInternalFrameTitlePaneInternalFrameTitlePaneMaximizeButtonWindowNotFocusedState",
                     "TokenAuthenticationProviderConfigurationProperties", "getSecretManagerServiceClientSettings",
                     "AwsSecretsManagerPropertySourceLocatorAutoConfiguration", "handlePasswordChangeSubmit",
                     "validateApiKeyHeaderMiddleware"]) + R.choice(["", "()", ".class", " extends Object"])


def english_sentence():
    subj = R.choice(["The quarterly report", "Our team", "The new onboarding flow", "This release", "The migration",
                     "Customer feedback", "The holiday schedule", "The build pipeline"])
    verb = R.choice(["was finalized", "looks great", "needs another review", "ships next week", "is attached",
                     "was moved to Thursday", "improved a lot", "is ready for sign-off"])
    tail = R.choice(["", " Thanks everyone for the help!", " Let me know if you have questions.",
                     " Please review before Friday.", " See the notes below."])
    return f"{subj} {verb}.{tail}"


@gen("N")
def n_base64_prose():
    s = base64.b64encode((english_sentence() + " " + english_sentence()).encode()).decode()
    return R.choice([s, f"Content-Type: text/plain; charset=\"utf-8\"\nContent-Transfer-Encoding: base64\n\n" + "\n".join(wrap(s, 76)),
                     f"body: {s}", f'"message": "{s}"'])


@gen("N")
def n_mime_part():
    inner = base64.b64encode(("Content-Type: text/plain; charset=UTF-8\r\n\r\n" + english_sentence()).encode()).decode()
    return R.choice([inner, f"--boundary_{rs(HEX, 12)}\nContent-Type: message/rfc822\nContent-Transfer-Encoding: base64\n\n{inner}"])


@gen("N")
def n_data_uri():
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + R.randbytes(R.randint(40, 120))
    b = base64.b64encode(png).decode()
    return R.choice([f'<img src="data:image/png;base64,{b}" alt="logo">', f"background-image: url(data:image/png;base64,{b});",
                     f"data:application/font-woff2;charset=utf-8;base64,d09GMgABAAAA{rb64(60)}"])


@gen("N")
def n_css_classes():
    return R.choice(['<div class="flex items-center justify-between px-4 py-2 bg-gray-800 text-white rounded-lg shadow-md hover:bg-gray-700">',
                     'className="mt-6 grid grid-cols-1 gap-x-6 gap-y-10 sm:grid-cols-2 lg:grid-cols-4 xl:gap-x-8"',
                     '<button class="btn btn-outline-secondary btn-sm dropdown-toggle" data-bs-toggle="dropdown">',
                     ".css-1dbjc4n{align-items:stretch;border:0 solid black;box-sizing:border-box;display:flex}",
                     'class="sc-bdVaJa kfPyNB"'])


@gen("N")
def n_minified_js():
    return R.choice(["var a=function(e,t){return e.__esModule?e:{default:e}},r=n(7294),o=n.n(r);",
                     "!function(e){var t={};function n(r){if(t[r])return t[r].exports}}([]);",
                     "const{useState:Qe,useEffect:Xe}=React;let Zt=Qe(0),en=Xe(()=>{},[]);",
                     "(self.webpackChunk_N_E=self.webpackChunk_N_E||[]).push([[405],{5557:function(e,t,n){}}]);",
                     "function tE(e){return e&&e.__esModule&&Object.prototype.hasOwnProperty.call(e,'default')?e['default']:e}"])


@gen("N")
def n_versions():
    return R.choice([f"version {R.randint(0, 9)}.{R.randint(0, 30)}.{R.randint(0, 99)}-beta.{R.randint(1, 9)}+build.{R.randint(1000, 9999)}",
                     f"build 2024{R.randint(1, 12):02d}{R.randint(1, 28):02d}.{R.randint(1, 9)}-rc{R.randint(1, 5)}",
                     f"Microsoft Windows [Version 10.0.{R.randint(19041, 22631)}.{R.randint(1000, 4000)}]",
                     f"openssl 3.0.{R.randint(2, 13)} 30 Jan 2024 (Library: OpenSSL 3.0.{R.randint(2, 13)})",
                     f'"version": "{R.randint(1, 20)}.{R.randint(0, 20)}.{R.randint(0, 20)}"',
                     f"Chrome/124.0.{R.randint(6000, 6400)}.{R.randint(10, 200)} Safari/537.36"])


@gen("N")
def n_numbers():
    return R.choice([f"ISBN 978-0-13-{R.randint(100000, 999999)}-{R.randint(0, 9)}", f"Order #A-2024-{digits(7)}",
                     f"Call us at +1 (415) 555-{R.randint(1000, 1999)}", f"Invoice INV-{digits(8)} due 2024-07-01",
                     f"Tracking number: 1Z{rs(UPALNUM, 16)}", f"AWS account {digits(12)}",
                     f"arn:aws:iam::{digits(12)}:role/deploy-readonly", f"IBAN DE89 3704 0044 {R.randint(1000, 9999)} {R.randint(1000, 9999)} 00",
                     f"ticket #{digits(6)}", f"MAC 00:1A:2B:{R.randint(10, 99)}:4C:5D"])


def ssh_pub():
    if R.random() < 0.5:
        blob = _sshstr(b"ssh-rsa") + _sshstr(b"\x01\x00\x01") + _sshstr(b"\x00" + R.randbytes(256))
        return "ssh-rsa " + base64.b64encode(blob).decode()
    blob = _sshstr(b"ssh-ed25519") + _sshstr(R.randbytes(32))
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


@gen("N")
def n_ssh_public():
    return R.choice([f"{ssh_pub()} {user()}@laptop", f"ssh_authorized_keys:\n  - {ssh_pub()} deploy",
                     f"command=\"/usr/bin/rrsync -ro /backups\",no-pty {ssh_pub()} backup@nas",
                     f"{host()} {ssh_pub()}"])


@gen("N")
def n_public_key_pem():
    body = base64.b64encode(bytes.fromhex("30820122300d06092a864886f70d01010105000382010f003082010a0282010100") +
                            R.randbytes(256) + bytes.fromhex("0203010001")).decode()
    kind = R.choice(["PUBLIC KEY", "PUBLIC KEY", "RSA PUBLIC KEY"])
    if R.random() < 0.3:
        body = base64.b64encode(bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d03010703420004") + R.randbytes(64)).decode()
        kind = "PUBLIC KEY"
    return f"-----BEGIN {kind}-----\n" + "\n".join(wrap(body)) + f"\n-----END {kind}-----"


@gen("N")
def n_certificate():
    body = base64.b64encode(bytes.fromhex("308203c5308202ada003020102021400") + R.randbytes(R.randint(700, 950))).decode()
    pre = R.choice(["", "ca.crt: |\n", "# Root CA\n", "subject=CN = api.acme.io\nissuer=C = US, O = Let's Encrypt, CN = R3\n"])
    return pre + "-----BEGIN CERTIFICATE-----\n" + "\n".join(wrap(body)) + "\n-----END CERTIFICATE-----"


@gen("N")
def n_pgp_public_or_sig():
    raw = bytes([0x99, 0x01, 0x8D, 0x04]) + R.randbytes(R.randint(300, 400))
    s = base64.b64encode(raw).decode()
    cks = "=" + base64.b64encode(struct.pack(">I", crc24(raw))[1:]).decode()
    kind = R.choice(["PGP PUBLIC KEY BLOCK", "PGP SIGNATURE", "PGP MESSAGE"])
    return f"-----BEGIN {kind}-----\n\n" + "\n".join(wrap(s)) + f"\n{cks}\n-----END {kind}-----"


def sops_enc(typ="str", n=None):
    return (f"ENC[AES256_GCM,data:{rb64(n or R.randint(8, 40))},iv:{rb64(32)},tag:{rb64(16)},type:{typ}]")


@gen("N")
def n_sops():
    return R.choice([
        f"password: {sops_enc()}",
        f"db:\n    user: {sops_enc()}\n    password: {sops_enc()}\nsops:\n    kms: []\n    lastmodified: \"2024-04-02T09:12:44Z\"\n    mac: {sops_enc(n=32)}\n    version: 3.8.1",
        f'{{"api_token": "{sops_enc()}", "sops": {{"version": "3.8.1"}}}}',
        f"DB_PASSWORD={sops_enc()}"])


@gen("N")
def n_sealed_secrets():
    def enc():
        return base64.b64encode(b"\x02\x00" + bytes([R.randint(0x40, 0x7F)]) + R.randbytes(R.randint(300, 520))).decode()
    return (f"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: db-creds\n  namespace: prod\n"
            f"spec:\n  encryptedData:\n    password: {enc()}\n" + (f"    username: {enc()}\n" if R.random() < 0.5 else ""))


@gen("N")
def n_ansible_vault():
    lines = wrap(rs(HEX, R.randint(400, 700)), 80)
    if R.random() < 0.5:
        return "$ANSIBLE_VAULT;1.1;AES256\n" + "\n".join(lines)
    return "db_password: !vault |\n          $ANSIBLE_VAULT;1.1;AES256\n" + "\n".join("          " + l for l in lines)


@gen("N")
def n_vault_transit():
    c = "vault:v1:" + rb64(R.randint(28, 60))
    return R.choice([f'"ciphertext": "{c}"', f"db_password_encrypted: {c}", f"ENCRYPTED_TOKEN={c}",
                     f"$ vault write transit/decrypt/orders ciphertext={c}"])


@gen("N")
def n_urls_no_creds():
    return R.choice([f"postgres://{host()}:5432/{db()}", "redis://localhost:6379/0", "https://bob@github.com/acme/infra.git",
                     "mongodb://mongo-0:27017,mongo-1:27017/?replicaSet=rs0", f"jdbc:postgresql://{host()}:5432/{db()}?ssl=true",
                     "amqp://rabbitmq:5672/%2F", f"Server={host()};Database={db()};Integrated Security=SSPI;",
                     "https://api.acme.io/v1/users?page=2&per_page=50&sort=created_at",
                     "git@github.com:acme/infra.git", "ftp://ftp.gnu.org/gnu/"])


@gen("N")
def n_public_identifiers():
    return R.choice([f"GOOGLE_CLIENT_ID={digits(12)}-{rs(LOALNUM, 32)}.apps.googleusercontent.com",
                     f"STRIPE_PUBLISHABLE_KEY=pk_live_{rs(ALNUM, 24)}", f"NEXT_PUBLIC_STRIPE_KEY=pk_test_{rs(ALNUM, 24)}",
                     f"AZURE_CLIENT_ID={ruuid()}", f"\"client_id\": \"{ruuid()}\"", f"ALGOLIA_APP_ID={rs(UPALNUM, 10)}",
                     f"GITHUB_APP_ID={R.randint(100000, 999999)}", f"username: {user()}"])


@gen("N")
def n_password_config():
    return R.choice(["password_min_length: 12", "PASSWORD_HASHERS = ['django.contrib.auth.hashers.Argon2PasswordHasher']",
                     "password_reset_timeout: 3600", "token_expiry: 15m", "secret_rotation_days: 90",
                     "AUTH_PASSWORD_VALIDATORS = [{'NAME': 'django.contrib.auth.password_validation.MinimumLengthValidator'}]",
                     "max_password_age = 90", "require_password_change: true", "token_ttl_seconds=900",
                     "password_encryption = scram-sha-256", "PasswordAuthentication no", "ssl_key_file = 'server.key'"])


@gen("N")
def n_field_names():
    return R.choice(['<input type="password" name="password" autocomplete="current-password" required>',
                     "ALTER TABLE users ADD COLUMN password_hash VARCHAR(255) NOT NULL;",
                     '<label for="api-key">API key</label>', "SELECT id, email FROM users WHERE reset_token IS NOT NULL;",
                     '"auth.password.placeholder": "Enter your password"', "password_confirmation: Password confirmation",
                     "t.string :encrypted_password, null: false, default: \"\"", "@NotBlank private String password;"])


@gen("N")
def n_secret_refs():
    return R.choice(["valueFrom:\n  secretKeyRef:\n    name: db-creds\n    key: password",
                     "secrets:\n  - db_password\nenvironment:\n  POSTGRES_PASSWORD_FILE: /run/secrets/db_password",
                     'password = data.aws_secretsmanager_secret_version.db.secret_string',
                     "password: !secret mqtt_password", "token_file: /var/run/secrets/kubernetes.io/serviceaccount/token",
                     "envFrom:\n  - secretRef:\n      name: api-keys",
                     "credentials_file = \"~/.aws/credentials\"\nprofile = \"prod\""])


@gen("N")
def n_chunk_hashes():
    return R.choice([f"static/js/main.{rs(HEX, 8)}.chunk.js", f"app.{rs(HEX, 20)}.css",
                     f"<link rel=\"stylesheet\" href=\"/assets/index-{rs(B64URL, 8)}.css\">",
                     f"dist/vendor.{rs(HEX, 8)}.js  {R.randint(100, 900)}.{R.randint(10, 99)} kB",
                     f"_next/static/{rs(B64URL, 21)}/_buildManifest.js"])


@gen("N")
def n_cargo_lock():
    return (f"[[package]]\nname = \"{R.choice(['serde', 'tokio', 'regex', 'hyper', 'rand'])}\"\n"
            f"version = \"1.{R.randint(0, 40)}.{R.randint(0, 20)}\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\n"
            f"checksum = \"{sha256()}\"")


@gen("N")
def n_network_ids():
    return R.choice([f"inet6 fe80::{rs(HEX, 4)}:{rs(HEX, 4)}:{rs(HEX, 4)}:{rs(HEX, 4)}/64 scope link",
                     f"link/ether 02:42:{rs(HEX, 2)}:{rs(HEX, 2)}:{rs(HEX, 2)}:{rs(HEX, 2)} brd ff:ff:ff:ff:ff:ff",
                     f"BSSID {rs(HEX, 2)}:{rs(HEX, 2)}:{rs(HEX, 2)}:{rs(HEX, 2)}:{rs(HEX, 2)}:{rs(HEX, 2)}",
                     f"Container {rs(HEX, 12)} started", f"vpc-{rs(HEX, 17)} subnet-{rs(HEX, 17)}",
                     f"i-{rs(HEX, 17)} running t3.medium"])


@gen("N")
def n_secret_prose_words():
    return R.choice(["The secret ingredient is cardamom.", "Keep this a secret until the launch on Monday!",
                     "Tokens are counted per request, not per session.", "I'll pass on the meeting, thanks.",
                     "We need a new key for the supply closet.", "Our password manager of choice is Bitwarden.",
                     "Pass the salt, please.", "Token ring networks were common in the 1990s.",
                     "the key takeaway: ship smaller PRs", "Nonce words are words coined for a single occasion."])


@gen("N")
def n_hash_in_config():
    return R.choice([f"revision: {sha1()}", f"  resolved: {sha1()}", f"\"commit\": \"{sha1()}\", \"branch\": \"main\"",
                     f"cache-key: deps-{sha256()}", f"build_id: {rs(HEX, 12)}", f"ETag: W/\"{rs(HEX, 40)}\""])


@gen("N")
def n_random_ids():
    return R.choice([f"youtube.com/watch?v={rs(B64URL, 11)}", f"Figma file https://www.figma.com/file/{rs(ALNUM, 22)}/Design-System",
                     f"docs.google.com/document/d/{rs(B64URL, 44)}/edit", f"stripe event evt_{rs(ALNUM, 24)}",
                     f"customer cus_{rs(ALNUM, 14)}", f"PaymentIntent pi_{rs(ALNUM, 24)}",
                     f"Slack channel C{rs(UPALNUM, 10)}", f"message id <{rs(ALNUM, 20)}@mail.acme.io>"])


# --------------------------------------------------------------------------

SRC_PATHS = ["config/settings.py", "deploy/values.yaml", "README.md", "docs/setup.md",
             "src/main/resources/application.yml", "charts/api/templates/deployment.yaml",
             "scripts/bootstrap.sh", "src/auth/login.ts", "internal/db/conn.go", "docker-compose.yml",
             "app/models/user.rb", "infra/main.tf", "tests/conftest.py", "web/src/App.tsx",
             "CONTRIBUTING.md", "ansible/group_vars/all.yml", "src/lib.rs", "Makefile"]


def vary(text):
    """Put a negative in one more everyday setting (grep hit, diff, quote, log...)."""
    lines = text.split("\n")
    k = R.randrange(7)
    if k == 0:
        p, n = R.choice(SRC_PATHS), R.randint(1, 400)
        return "\n".join(f"{p}:{n + j}:{l}" for j, l in enumerate(lines))
    if k == 1:
        return "\n".join(R.choice("+-") + l for l in lines) if len(lines) == 1 else \
            f"@@ -{R.randint(1, 90)},7 +{R.randint(1, 90)},8 @@\n" + "\n".join("+" + l for l in lines)
    if k == 2:
        return "\n".join("> " + l for l in lines)
    if k == 3:
        lang = R.choice(["", "yaml", "bash", "python", "text", "go", "sql", "json"])
        return f"```{lang}\n{text}\n```"
    if k == 4:
        ind = R.choice(["  ", "    ", "\t"])
        return "\n".join(ind + l for l in lines)
    if k == 5:
        return "\n".join(f"{R.randint(1, 300) + j:4d} | {l}" for j, l in enumerate(lines))
    return f"{ts()} {R.choice(['INFO', 'DEBUG', 'WARN'])} {R.choice(['config', 'main', 'lint', 'review-bot'])}: " + \
        text.replace("\n", " \u21b5 ")


def build():
    entries = []
    seen = set()

    def add(cls, kind, text, secrets):
        assert isinstance(text, str) and text
        for s in secrets:
            assert s and s in text, (cls, kind, s, text)
        if cls != "N":
            assert secrets, (cls, kind, text)
            for s in secrets:
                assert len(s) >= 4, (cls, kind, s)
            # a random body may spell a placeholder by chance ("xXx"): draw again
            if any(h in s.lower() for s in secrets for h in PLACEHOLDER_HINTS):
                return False
        key = (cls, text)
        if key in seen:
            return False
        seen.add(key)
        entry = {"class": cls, "kind": kind, "text": text, "secrets": list(dict.fromkeys(secrets))}
        if cls == "N":
            entry["against"] = AGAINST[kind]
        entries.append(entry)
        return True

    for cls, n in TARGETS.items():
        i = 0
        made = 0
        while made < n:
            if cls == "D":
                kind, text, secrets = gen_vendor_entry(i)
            else:
                f = GENS[cls][i % len(GENS[cls])]
                text, secrets = f()
                kind = f.__name__[2:]
            i += 1
            if add(cls, kind, text, secrets):
                made += 1
    i = made = 0
    while made < N_NEG:
        f = GENS["N"][i % len(GENS["N"])]
        i += 1
        for attempt in range(50):
            text = f()
            if attempt or R.random() < 0.3:
                text = vary(text)
            if add("N", f.__name__[2:], text, []):
                made += 1
                break
        else:
            raise SystemExit(f"negatives: {f.__name__} keeps repeating")
    return entries


# The class whose detectors each kind of negative tempts: per-class precision counts a
# negative's false positive against that class.
AGAINST = {
    **dict.fromkeys(
        ["key_value_prose", "prose_policy", "reset_email", "secret_prose_words", "test_output",
         "weak_words", "masked", "filler_values", "field_names"], "A"),
    "identified_by": "B",
    **dict.fromkeys(["cli_docs", "cli_vars", "angle_placeholders"], "C"),
    **dict.fromkeys(
        ["fake_aws", "fake_github", "fake_sk", "fake_slack_and_others", "fake_stripe",
         "public_identifiers", "random_ids", "camel_identifiers", "css_classes", "minified_js",
         "chunk_hashes", "git_shas", "hashes", "uuids", "docker_digest", "integrity", "go_sum",
         "cargo_lock", "versions", "numbers", "network_ids", "paths", "xml_ns", "data_uri",
         "base64_prose", "mime_part"], "D"),
    **dict.fromkeys(["urls_no_creds", "request_headers"], "E"),
    **dict.fromkeys(
        ["env_lookup", "env_refs", "getpass", "openapi_string", "password_config", "secret_refs",
         "templating", "type_annotations", "hash_in_config"], "F"),
    **dict.fromkeys(
        ["certificate", "public_key_pem", "pgp_public_or_sig", "ssh_public", "sealed_secrets",
         "sops", "vault_transit", "ansible_vault"], "G"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()
    entries = build()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for e in entries:
            fh.write(json.dumps(e, ensure_ascii=False) + "\n")
    counts = Counter(e["class"] for e in entries)
    kinds = {c: len({e["kind"].split("/")[0] for e in entries if e["class"] == c}) for c in counts}
    print(f"wrote {len(entries)} entries to {out} ({out.stat().st_size / 1e6:.2f} MB)")
    print("class  entries  kinds")
    for c in list(TARGETS) + ["N"]:
        print(f"  {c}    {counts[c]:6d}  {kinds.get(c, 0):5d}")
    pos = sum(counts[c] for c in TARGETS)
    print(f"  positives {pos}, negatives {counts['N']}, vendors {len(VENDORS)}")


if __name__ == "__main__":
    main()
