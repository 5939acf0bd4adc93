//! The detector table: one row per kind of secret or personal data, each a `regex` pattern
//! (linear time, no backtracking) with an optional capture group that holds the sensitive part
//! and an optional check that a candidate must pass (Luhn, IBAN checksum, SSN ranges, …).

use super::{extract, validate};

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Credentials: keys, tokens, passwords.
    Secret,
    /// Personal data.
    Pii,
    /// A high-entropy token no named detector recognised.
    Entropy,
    /// Prompt-injection signals: instructions aimed at the agent, fake tool-call syntax,
    /// invisible Unicode. Never masked in stored text (they are not sensitive); gates warn,
    /// mask or block them as configured.
    Injection,
}

impl Category {
    /// Every category.
    pub const ALL: [Category; 4] = [
        Category::Secret,
        Category::Pii,
        Category::Entropy,
        Category::Injection,
    ];

    /// Whether findings of this category are masked in everything stored or shown.
    pub fn sensitive(self) -> bool {
        self != Category::Injection
    }

    /// The name used in config and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Secret => "secret",
            Category::Pii => "pii",
            Category::Entropy => "entropy",
            Category::Injection => "injection",
        }
    }
}

/// Reads the sensitive part's span out of a match (offsets in the match).
pub(super) type Extract = fn(&[u8]) -> Option<(usize, usize)>;

/// One row of the table.
pub(super) struct Pattern {
    pub kind: &'static str,
    pub category: Category,
    pub regex: &'static str,
    /// The capture group holding the sensitive part (0: the whole match). With an `extract`,
    /// scans use that instead and the tests hold the two equal; without one, a capture engine
    /// reads the group (rows that match rarely).
    pub group: usize,
    /// Reads that group's span out of the match (offsets in the match), without a capture
    /// engine; tested equal to the group.
    pub extract: Option<Extract>,
    /// A check the candidate must pass.
    pub check: Option<fn(&str) -> bool>,
    /// Off unless configured (noisy in code and logs).
    pub optional: bool,
}

const fn p(kind: &'static str, category: Category, regex: &'static str) -> Pattern {
    Pattern {
        kind,
        category,
        regex,
        group: 0,
        extract: None,
        check: None,
        optional: false,
    }
}

const fn g(kind: &'static str, regex: &'static str, extract: Extract) -> Pattern {
    Pattern {
        kind,
        category: Category::Secret,
        regex,
        group: 1,
        extract: Some(extract),
        check: None,
        optional: false,
    }
}

const fn checked(kind: &'static str, regex: &'static str, check: fn(&str) -> bool) -> Pattern {
    Pattern {
        kind,
        category: Category::Pii,
        regex,
        group: 0,
        extract: None,
        check: Some(check),
        optional: false,
    }
}

/// A secret read from capture group 1 of `regex`, kept only when `check` passes.
const fn grouped(kind: &'static str, regex: &'static str, check: fn(&str) -> bool) -> Pattern {
    Pattern {
        kind,
        category: Category::Secret,
        regex,
        group: 1,
        extract: None,
        check: Some(check),
        optional: false,
    }
}

use Category::{Injection, Pii, Secret};

/// An AI system as injected text addresses it: by kind or by product name.
macro_rules! ai {
    () => {
        r"(?:(?:ai|llm|virtual|autonomous|automated|digital)[ \t\-]+(?:agents?|assistants?|models?|systems?|bots?|readers?|tools?)|a\.i\.|ai|llms?|(?:large[ \t]+)?language[ \t]+models?|chat-?gpt|gpt-?[0-9](?:[a-z0-9\-]|\.[0-9])*|gpt|claude|gemini|copilot|chatbots?|bots?|assistants?)"
    };
}

/// What a tool can be made to do.
macro_rules! act {
    () => {
        r"(?:send|forward|e-?mail|text|transfer|wire|pay|fetch|visit|open|browse|download|upload|delete|remove|erase|wipe|share|grant|invite|add|post|publish|reset|change|update|export|copy|move|execute|run|click|navigate|call|give|create|reply|reveal|disclose|print|output|include|append|insert|schedule|book|cancel|approve|purchase|buy|order|install|save|write|summari[sz]e|go\s+to|make|grab|paste|attach|submit|disable|rotate|mark|clone|mirror|follow|like|accept|decline|label|assign|set|place|merge|push|deploy|stop|read|collect|leak|exfiltrate)"
    };
}

/// Where an injected action sends something, or what it takes: a URL, an address, money, an
/// account, a phone number, a handle, everything of a kind, the user's things, credentials,
/// ownership.
macro_rules! target {
    () => {
        r"(?:https?://|www\.|[\w.+\-]+@[\w\-]+\.[a-z]{2,}|\$\s?[0-9]|\b[0-9][0-9,.]*\s?(?:usd|eur|gbp|dollars|euros|pounds)\b|\b(?:usd|eur|gbp)\s?[0-9]|\biban\b|\b[a-z]{2}[0-9]{2}(?:\s?[a-z0-9]{4}){3,}|\baccount\s+(?:number\s+|no\.?\s*|\#\s*|ending\s+(?:in\s+)?)?[0-9]|\+[0-9][0-9 \-]{6,}[0-9]|\b(?:all|every|any)\s+(?:of\s+)?(?:the\s+|your\s+|my\s+|their\s+|his\s+|her\s+)?(?:[\w\-]+\s+)?(?:files?|e-?mails?|messages?|contacts?|documents?|data|records?|invoices?|passwords?|credentials?|keys?|tokens?|conversations?|history|customers?|funds|users?|backups?|meetings?|invitations?|repos|repositories|secrets?|photos?|notes?)\b|\bthe\s+(?:user|owner|customer|client|account\s+holder|sender)'?s\b|\b(?:api|access|secret|private|ssh)[\s_\-]?keys?\b|\bcredentials\b|\b(?:backup|recovery|2fa|mfa|otp)\s+codes?\b|\bas\s+(?:an?\s+)?(?:second\s+)?(?:owner|admin(?:istrator)?|editor|delegate)s?\b|\badmin\s+rights\b|\bpasswords?\s+(?:to|doc|file|list)\b|@[a-z][\w\-]{2,}|\b(?:audit\s+logs?|mfa|2fa|two-factor|security\s+(?:settings|alerts?|logs?)|firewall|antivirus|monitoring)\b|\binvite\s+links?\b|\banyone\s+(?:with\s+the\s+link|on\s+the\s+internet)\b|\bpublic(?:ly)?\b)"
    };
}

/// Every detector, most specific first (on overlap the earlier row wins).
pub(super) const PATTERNS: &[Pattern] = &[
    // Private keys: the header and the key characters after it; the scan then extends the
    // finding to the block's END line when one follows (`extend_key_blocks`), whatever sits
    // between the lines (code string concatenation, log prefixes). Encrypted keys (`ENCRYPTED
    // PRIVATE KEY`) are masked too: the ciphertext is one weak passphrase away from the key.
    p(
        "private-key-rsa",
        Secret,
        r"-----BEGIN RSA PRIVATE KEY-----[A-Za-z0-9+/=\s\\:,\-]*(?:-----END RSA PRIVATE KEY-----)?",
    ),
    p(
        "private-key-ec",
        Secret,
        r"-----BEGIN EC PRIVATE KEY-----[A-Za-z0-9+/=\s\\:,\-]*(?:-----END EC PRIVATE KEY-----)?",
    ),
    p(
        "private-key-openssh",
        Secret,
        r"-----BEGIN OPENSSH PRIVATE KEY-----[A-Za-z0-9+/=\s\\:,\-]*(?:-----END OPENSSH PRIVATE KEY-----)?",
    ),
    p(
        "private-key-pgp",
        Secret,
        r"-----BEGIN PGP PRIVATE KEY BLOCK-----[A-Za-z0-9+/=\s\\:,.()\-]*(?:-----END PGP PRIVATE KEY BLOCK-----)?",
    ),
    p(
        "private-key",
        Secret,
        r"-----BEGIN (?:ENCRYPTED |DSA )?PRIVATE KEY-----[A-Za-z0-9+/=\s\\:,\-]*(?:-----END (?:ENCRYPTED |DSA )?PRIVATE KEY-----)?",
    ),
    // A PEM private key, base64-encoded again (kubeconfig `client-key-data`, Helm values).
    p(
        "private-key-base64",
        Secret,
        r"LS0tLS1CRUdJTiB(?:SU0EgUFJJVkFURSBLRVkt|QUklWQVRFIEtFWS0|FQyBQUklWQVRFIEtFWS0|PUEVOU1NIIFBSSVZBVEUgS0VZLS0|FTkNSWVBURUQgUFJJVkFURSBLRVkt)[A-Za-z0-9+/=]*",
    ),
    // A private key's DER body in base64 with no PEM armour (an environment variable, a JSON
    // field): PKCS#1 RSA (`MIIEpAIBAAKCAQEA…`) and PKCS#8 (`MIIEvgIBADANBgkqhkiG9w0BAQEFAASC…`)
    // begin with a sequence length, then fixed bytes; a public key's body does not.
    p(
        "private-key-der",
        Secret,
        r"\bMII[A-Za-z0-9+/]{2}[AQgw]IBA(?:AK[BC]|DANBgkqhkiG9w0BAQEFAAS[BC])[A-Za-z0-9+/]{100,}={0,2}",
    ),
    // SEC1 EC private keys: P-256 (`MHcCAQEEI…`) and P-384 (`MIGkAgEBBDA…`).
    p(
        "private-key-der",
        Secret,
        r"\bM(?:HcCAQEEI|IGkAgEBBD)[A-Za-z0-9+/]{100,}={0,2}",
    ),
    // age (`AGE-SECRET-KEY-1…`, bech32) and NATS NKEY seeds (`SU…`, base32).
    p(
        "age-secret-key",
        Secret,
        r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b",
    ),
    p("nkey-seed", Secret, r"\bS[UOACNPAX][A-Z2-7]{54,56}\b"),
    p(
        "aws-access-key",
        Secret,
        r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
    ),
    g(
        "aws-secret-key",
        r#"(?i:aws_?secret(?:_?access)?_?key|aws_?secret)(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+]|$)"#,
        extract::aws_secret,
    ),
    p("gcp-api-key", Secret, r"\bAIza[0-9A-Za-z_\-]{35}"),
    g(
        "gcp-service-account",
        r#"\\?"private_key_id\\?"\s*:\s*\\?"([a-f0-9]{40})\\?""#,
        extract::quoted_40,
    ),
    g(
        "azure-storage-key",
        r"AccountKey=([A-Za-z0-9+/]{86}==)",
        extract::after_account_key,
    ),
    p(
        "azure-client-secret",
        Secret,
        r"\b[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34}",
    ),
    p(
        "stripe-live-key",
        Secret,
        r"\b(?:sk|rk)_live_[0-9A-Za-z]{24,99}\b",
    ),
    p(
        "stripe-test-key",
        Secret,
        r"\b(?:sk|rk)_test_[0-9A-Za-z]{24,99}\b",
    ),
    p(
        "anthropic-key",
        Secret,
        r"\bsk-ant-(?:api|admin)[0-9]{2}-[A-Za-z0-9_\-]{80,}",
    ),
    p(
        "openai-key",
        Secret,
        r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
    ),
    p("github-pat", Secret, r"\bghp_[A-Za-z0-9]{36}\b"),
    p(
        "github-fine-grained-pat",
        Secret,
        r"\bgithub_pat_[A-Za-z0-9_]{82}\b",
    ),
    p(
        "github-app-token",
        Secret,
        r"\b(?:ghu|ghs)_[A-Za-z0-9]{36}\b",
    ),
    p(
        "github-oauth-token",
        Secret,
        r"\b(?:gho|ghr)_[A-Za-z0-9]{36}\b",
    ),
    p(
        "gitlab-token",
        Secret,
        r"\b(?:gl(?:pat|ptt|rt|dt|ft|cbt|imt|oas|soat|agent|ffct)-[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9_\-]+)*|GR1348941[A-Za-z0-9_\-]{20,})",
    ),
    g(
        "gitlab-session",
        r"\b_gitlab_session=([a-f0-9]{32})\b",
        extract::after_equals,
    ),
    p(
        "slack-webhook",
        Secret,
        r"https://hooks\.slack\.com/(?:services|workflows)/T[A-Z0-9]+/[A-Z0-9]+/[A-Za-z0-9]{24}",
    ),
    // A webhook URL is its own credential: whoever has the path can post. Any path shape
    // after the host, as long as it is long and varied (not `Txxxx/Bxxxx/xxxx`).
    grouped(
        "slack-webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/+\-]{24,})",
        validate::webhook_path,
    ),
    grouped(
        "teams-webhook",
        r"https://[A-Za-z0-9\-]+\.webhook\.office\.com/webhookb2/([A-Za-z0-9@/\-]{40,})",
        validate::webhook_path,
    ),
    // Bundler's credentials for a gem source, one variable per host
    // (`BUNDLE_ENTERPRISE__CONTRIBSYS__COM=user:pass`, dots written `__`).
    grouped(
        "bundler-credentials",
        r#"\bBUNDLE_[A-Z0-9_]*__[A-Z0-9]+\s*[=:]\s*["']?([^\s"':]{1,128}:[^\s"';&]{4,128})"#,
        validate::assignment_value,
    ),
    p(
        "doppler-token",
        Secret,
        r"\bdp\.(?:pt|st|ct|sa|scim|audit)\.(?:[a-z0-9_\-]{1,32}\.)?[A-Za-z0-9]{40,48}\b",
    ),
    p("adobe-client-secret", Secret, r"\bp8e-[A-Za-z0-9]{32}\b"),
    p(
        "intra42-secret",
        Secret,
        r"\bs-s4t2(?:ud|af)-[a-f0-9]{64}\b",
    ),
    // Twitter/X app bearer tokens: twenty-odd `A`s, then the key, URL-encoded.
    // The `A`s are the same in every token; the key after them is masked.
    grouped(
        "twitter-bearer-token",
        r"\bAAAAAAAAAAAAAAAAAAAA+([B-Za-z0-9%][A-Za-z0-9%]{29,200})",
        validate::has_percent,
    ),
    p(
        "slack-token",
        Secret,
        r"\bxox[abposr]-(?:[0-9]+-){1,3}[A-Za-z0-9]{10,}",
    ),
    // App-level tokens (`xapp-1-A…-…-<hex>`), and configuration and refresh tokens
    // (`xoxe.xoxp-1-…`, `xoxe-1-…`).
    p(
        "slack-token",
        Secret,
        r"\bxapp-[0-9]+-[A-Z0-9]+-[0-9]+-[a-f0-9]{32,}",
    ),
    p(
        "slack-token",
        Secret,
        r"\bxoxe(?:\.xox[bp])?-[0-9]+-[A-Za-z0-9]{60,}",
    ),
    p("npm-token", Secret, r"\bnpm_[A-Za-z0-9]{36}\b"),
    p(
        "pypi-token",
        Secret,
        r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}",
    ),
    p("sendgrid-key", Secret, r"\bSG\.[A-Za-z0-9=_\-.]{66}"),
    p("twilio-key", Secret, r"\bSK[0-9a-fA-F]{32}\b"),
    p("mailgun-key", Secret, r"\bkey-[0-9a-f]{32}\b"),
    p("digitalocean-token", Secret, r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
    p("huggingface-token", Secret, r"\bhf_[A-Za-z0-9]{34,40}\b"),
    p(
        "shopify-token",
        Secret,
        r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b",
    ),
    p(
        "google-oauth-secret",
        Secret,
        r"\bGOCSPX-[A-Za-z0-9_\-]{28}",
    ),
    // Vendor formats from the vendors' public documentation.
    p(
        "newrelic-key",
        Secret,
        r"\b(?:NRAK-[A-Za-z0-9]{27}|NRII-[A-Za-z0-9_\-]{32}|NRJS-[a-f0-9]{19}|NRAA-[a-f0-9]{27})\b",
    ),
    // Prefixed tokens of AI, infrastructure and SaaS vendors, by the shapes their docs give
    // (bodies in either case: generators and older formats use both).
    p("vault-token", Secret, r"\bhv[sbr]\.[A-Za-z0-9_\-]{24,}"),
    p(
        "grafana-token",
        Secret,
        r"\b(?:glc_[A-Za-z0-9+/]{32,400}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b|eyJrIjoi[A-Za-z0-9+/]{70,400}={0,2})",
    ),
    p(
        "planetscale-token",
        Secret,
        r"\bpscale_(?:pw|tkn|oauth)_[A-Za-z0-9_=.\-]{32,64}",
    ),
    p(
        "linear-key",
        Secret,
        r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b",
    ),
    p("prefect-token", Secret, r"\bpnu_[A-Za-z0-9]{36}\b"),
    p(
        "brevo-key",
        Secret,
        r"\bx(?:keysib|smtpsib)-[a-f0-9]{64}-[A-Za-z0-9]{16}\b",
    ),
    p("typeform-token", Secret, r"\btfp_[A-Za-z0-9_=.\-]{56,64}"),
    p("frameio-token", Secret, r"\bfio-u-[A-Za-z0-9_=\-]{64}"),
    p(
        "plaid-token",
        Secret,
        r"\baccess-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
    ),
    p("google-oauth-token", Secret, r"\bya29\.[A-Za-z0-9_\-]{30,}"),
    p(
        "square-token",
        Secret,
        r"\bsq0(?:atp-[A-Za-z0-9_\-]{22}|csp-[A-Za-z0-9_\-]{43})\b",
    ),
    p(
        "atlassian-token",
        Secret,
        r"\bATATT3[A-Za-z0-9_=\-]{150,250}",
    ),
    p("jfrog-key", Secret, r"\bAKCp[A-Za-z0-9]{69}\b"),
    p("clojars-token", Secret, r"\bCLOJARS_[a-z0-9]{60}\b"),
    p("groq-key", Secret, r"\bgsk_[A-Za-z0-9]{52}\b"),
    p("xai-key", Secret, r"\bxai-[A-Za-z0-9]{80}\b"),
    p("replicate-token", Secret, r"\br8_[A-Za-z0-9]{37}\b"),
    p("perplexity-key", Secret, r"\bpplx-[A-Za-z0-9]{48}\b"),
    p("nvidia-key", Secret, r"\bnvapi-[A-Za-z0-9_\-]{64}\b"),
    p(
        "hubspot-token",
        Secret,
        r"\bpat-(?:na|eu)[0-9]-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
    ),
    p(
        "onepassword-token",
        Secret,
        r"\bops_eyJ[A-Za-z0-9+/]{100,}={0,3}",
    ),
    p("supabase-token", Secret, r"\bsbp_[a-f0-9]{40}\b"),
    p("sonarqube-token", Secret, r"\bsq[upa]_[a-f0-9]{40}\b"),
    p(
        "sentry-token",
        Secret,
        r"\b(?:sntryu_[a-f0-9]{64}|sntrys_[A-Za-z0-9+/=_]{60,})",
    ),
    p(
        "dynatrace-token",
        Secret,
        r"\bdt0[a-z][0-9]{2}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}\b",
    ),
    p(
        "databricks-token",
        Secret,
        r"\bdapi[a-f0-9]{32}(?:-[0-9]+)?\b",
    ),
    p(
        "docker-swarm-token",
        Secret,
        r"\bSWMTKN-1-[a-z0-9]{50}-[a-z0-9]{25}\b",
    ),
    p("postman-key", Secret, r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"),
    p("nuget-key", Secret, r"\boy2[a-z0-9]{43}\b"),
    p("alibaba-access-key", Secret, r"\bLTAI[A-Za-z0-9]{12,20}\b"),
    p("rubygems-key", Secret, r"\brubygems_[a-f0-9]{48}\b"),
    p(
        "braintree-token",
        Secret,
        r"\baccess_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}\b",
    ),
    p(
        "akamai-token",
        Secret,
        r"\bakab-[a-z0-9]{16}-[a-z0-9]{16}\b",
    ),
    p(
        "terraform-token",
        Secret,
        r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-]{60,70}",
    ),
    p("mailchimp-key", Secret, r"\b[0-9a-f]{32}-us[0-9]{1,2}\b"),
    p(
        "langsmith-key",
        Secret,
        r"\blsv2_(?:sk|pt)_[0-9a-f]{32}_[0-9a-f]{10}\b",
    ),
    p("easypost-key", Secret, r"\bEZ[AT]K[0-9A-Za-z]{54}\b"),
    p("readme-key", Secret, r"\brdme_[a-z0-9]{70}\b"),
    // A bot token alone or in an API URL (`/bot123456789:AA…/sendMessage`).
    Pattern {
        group: 1,
        ..p(
            "telegram-bot-token",
            Secret,
            r"(?:\b|/bot)([0-9]{8,10}:AA[0-9A-Za-z_\-]{33})(?:[^0-9A-Za-z_\-]|$)",
        )
    },
    p("pulumi-token", Secret, r"\bpul-[a-f0-9]{40}\b"),
    p(
        "shippo-token",
        Secret,
        r"\bshippo_(?:live|test)_[a-f0-9]{40}\b",
    ),
    p("adafruit-key", Secret, r"\baio_[A-Za-z0-9]{28}\b"),
    p("asana-token", Secret, r"\b[0-9]/[0-9]{16}:[0-9a-f]{32}\b"),
    p(
        "teams-webhook",
        Secret,
        r"https://[a-z0-9.\-]*\.(?:office|webhook\.office)\.com/webhook(?:b2)?/[0-9a-f\-]{36}@[0-9a-f\-]{36}/IncomingWebhook/[0-9a-f]{32}/[0-9a-f\-]{36}",
    ),
    p(
        "jwt",
        Secret,
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{16,}",
    ),
    g(
        "database-url",
        r#"\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|sqlserver|clickhouse)://[^\s:/@"'<>]*:([^\s@/"'<>]+)@"#,
        extract::url_password,
    ),
    g(
        "url-credentials",
        r#"\b[a-z][a-z0-9+.\-]*://[^\s:/@"'<>]*:([^\s@/"'<>]+)@"#,
        extract::url_password,
    ),
    g(
        "authorization-header",
        r#"(?i:\bauthorization)(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?(?i:bearer|basic|token)\s+([A-Za-z0-9._~+/=\-]{16,})"#,
        extract::last_word,
    ),
    Pattern {
        check: Some(validate::label_value),
        ..g(
            "env-secret",
            r#"[A-Z0-9_](?:API_?KEY|_TOKEN|_SECRET|SECRET_KEY|ACCESS_KEY|PRIVATE_KEY|_PASSWORD|_PASSWD|_PSWD|_PWD|_PASS|_PW|_PASSPHRASE|_CREDENTIALS?|_AUTH)[ \t]*=[ \t]*(?:\\?["'])?([^\s"'\\]{8,})"#,
            extract::after_equals,
        )
    },
    // A type after the label is a declaration (`password: String`), not a value: the
    // typed-default row reads the literal that follows it. A value on the next line must be
    // indented (YAML): after an empty `API_KEY=`, the next line's name is not its value.
    Pattern {
        check: Some(validate::assignment_value),
        ..g(
            "password-assignment",
            r#"(?i:password|passwd|passphrase|secret|api_?key|access_?token|auth_?token|refresh_?token|private_?key)(?:\\?["'])?\s*(?:[:=]|%3[ADad])[ \t]*(?:\r?\n[ \t]+)?(?:\\?["'])?([^\s"'\\,;{}()\[\]<>]{1,3}[;,][^\s"'\\,;{}()\[\]<>]{3,}|[^\s"'\\,;{}()\[\]<>]{4,}[(\[]?)"#,
            extract::after_colon_or_equals,
        )
    },
    // Short and abbreviated labels, and the operators code and configs use: `pw: x`,
    // `PWD=x`, `pass => 'x'`, `passcode := x`, `ID:alice PW:x`, `user=a,pass=x`.
    Pattern {
        check: Some(validate::label_value),
        ..g(
            "short-label-password",
            r#"(?i:\b(?:pw|pwd|pass|pswd|passcode|pword|password|passwd))(?:\\?["'])?\s*(?:=>|:=|[:=])[ \t]*(?:\r?\n[ \t]+)?(?:\\?["'])?([^\s"'\\,;{}()\[\]<>]{1,3}[;,][^\s"'\\,;{}()\[\]<>]{3,}|[^\s"'\\,;{}()\[\]<>]{4,}[(\[]?)"#,
            extract::after_operator,
        )
    },
    // Code: a typed default (`passwd: str = "x"`, `val password: String = "x"`), a comparison
    // (`if password == "x"`) and a macro (`#define DB_PASSWORD "x"`).
    Pattern {
        check: Some(validate::not_a_constant),
        ..g(
            "code-secret",
            r#"(?i:pass(?:word|wd|phrase)?|pwd|secret|token|api_?key|credentials?)\s*(?::\s*&?(?:'[a-z_]+\s+)?(?:mut\s+)?[A-Za-z_][A-Za-z0-9_.\[\]<>|?]{0,40}\s*=|===?|!==?)\s*\\?["']([^"'\\\s]{4,})\\?["']"#,
            extract::quoted_tail,
        )
    },
    g(
        "code-secret",
        r#"#define\s+[A-Za-z0-9_]*(?i:pass(?:word|wd)?|pwd|secret|token|key)[A-Za-z0-9_]*\s+\\?"([^"\\\s]{4,})\\?""#,
        extract::quoted_tail,
    ),
    // SQL that sets a password: `IDENTIFIED [WITH plugin] BY '…'` (MySQL, MariaDB, Oracle),
    // `[ENCRYPTED|LOGIN|WITH] PASSWORD '…'` (PostgreSQL, SQL Server's `PASSWORD = '…'` is the
    // assignment row's). Quoted values only: prose says "identified by the team".
    Pattern {
        check: Some(validate::not_a_template),
        ..g(
            "sql-password",
            r#"(?i:\bidentified(?:\s+with\s+[a-z0-9_]+)?\s+by(?:\s+password)?|\bset\s+password\s+for\s+\S{1,128}\s*=\s*(?:password\s*\(\s*)?|\bpassword\s*(?:=\s*)?(?:password\s*\(\s*)?n?|\bpassword\s*\()\s*\\?['"]([^'"\s\\]{3,128})\\?['"]"#,
            extract::quoted_tail,
        )
    },
    // Oracle and MySQL without quotes: `IDENTIFIED BY mango820`.
    Pattern {
        check: Some(validate::cli_value),
        group: 1,
        ..p(
            "sql-password",
            Secret,
            r#"(?i:\bidentified\s+by)\s+([A-Za-z0-9_#$!@%^&*+\-.~]{3,128})"#,
        )
    },
    // Command lines: `--password X`, `--passphrase=X`, `-pw X` (not `--password-file`), and
    // `curl -u user:pass`; a shell reference (`$PASS`, `${PASS}`, `%PASS%`) is not a value,
    // nor a plain lowercase word after a flag (`the --password option`).
    Pattern {
        check: Some(validate::cli_value),
        ..g(
            "cli-password",
            r#"(?:^|\s)--?(?i:password|passwd|passphrase|pass|pwd|pw)(?:=|\s+)['"]?([^\s'"]{3,128})"#,
            extract::flag_value,
        )
    },
    // Longer flag names (`--admin-password X`, `--access-token=X`, `-srcstorepass X`), the
    // short `-p` of mysql, sshpass, docker and psexec (`-pSECRET`, `-p 'X'`; not a port or a
    // port mapping), `ssh-keygen -N`, and `htpasswd -b FILE USER X`.
    Pattern {
        check: Some(validate::cli_value),
        group: 1,
        ..p(
            "cli-password",
            Secret,
            r#"(?:^|\s)--?(?i:(?:[a-z0-9]+[-_])+(?:password|passwd|passphrase|pass|pwd|token|secret|api[-_]?key|access[-_]?key|secret[-_]?key)|(?:access|auth|api|bearer|client)[-_]?(?:token|secret|key)|token|secret|(?:src|dest)?(?:store|key)pass|storepass)(?:=|\s+)['"]?([^\s'"]{3,256})"#,
        )
    },
    Pattern {
        check: Some(validate::short_flag_value),
        group: 1,
        ..p(
            "cli-password",
            Secret,
            r#"(?:^|\s)(?:-p|-N)(?:\s+['"]?|['"]?)([^\s'"-][^\s'"]{2,127})"#,
        )
    },
    Pattern {
        check: Some(validate::cli_value),
        group: 1,
        ..p(
            "cli-password",
            Secret,
            r#"\bhtpasswd\s+-[A-Za-z]*b[A-Za-z]*\s+(?:\S+\s+)?\S+\s+['"]?([^\s'"<>|]{3,128})"#,
        )
    },
    // API calls that take a user and a password: `auth=("u", "p")`, `HTTPBasicAuth('u', 'p')`,
    // `NetworkCredential("u", "p")`, `smtp.login("u", "p")`, `PasswordAuthentication("u",
    // "p"…)`, `PSCredential('u', …)`; `ConvertTo-SecureString "p"`; a browser test typing
    // into a password field (`page.fill('#password', 'p')`); a setter (`setPassword("p")`);
    // `/user:NAME p` of `net use`; `echo p | sudo -S`.
    Pattern {
        check: Some(validate::label_value),
        group: 1,
        ..p(
            "api-call-password",
            Secret,
            r#"(?i:\bauth\s*=\s*\(|(?:Basic|Digest|Ntlm|Proxy)Auth\(|NetworkCredential\(|PasswordAuthentication\(|UsernamePasswordCredentials\(|\.login\(|PSCredential\(|\bcredentials\()\s*\\?["'][^"'\\]{1,128}\\?["']\s*,\s*\\?["']([^"'\\]{3,128})\\?["']"#,
        )
    },
    Pattern {
        check: Some(validate::label_value),
        group: 1,
        ..p(
            "api-call-password",
            Secret,
            r#"(?i:ConvertTo-SecureString(?:\s+-String)?|\.set(?:password|passwd|secret|token|apikey|api_key|credentials?|authtoken|accesstoken)\(|\.(?:fill|type|send_keys|sendKeys|setValue)\(\s*["'][^"']{0,64}(?:pass|pwd)[^"']{0,64}["']\s*,)\s*\\?["']([^"'\\]{3,128})\\?["']"#,
        )
    },
    Pattern {
        check: Some(validate::cli_value),
        group: 1,
        ..p(
            "cli-password",
            Secret,
            r#"(?i:/user:\S{1,128}\s+|\s/rp\s+|\bldap[a-z]*\b[^\n]{0,200}?\s-w\s+['"]?|\b(?:add_user|change_password)\s+\S{1,128}\s+['"]?|\bsudo\s+-S\s*<<<\s*['"]?)([^\s'"/][^\s'"]{3,127})"#,
        )
    },
    Pattern {
        check: Some(validate::cli_value),
        group: 1,
        ..p(
            "cli-password",
            Secret,
            r#"\becho\s+['"]?([^\s'"|]{4,128})['"]?\s*\|\s*sudo\s+-S\b"#,
        )
    },
    // Tools whose password flag is not named for one: `redis-cli -a X`, Samba's
    // `-U user%X`, `net user NAME X /add`, and a command that prints the password
    // (`--password-command "echo X"`).
    grouped(
        "cli-password",
        r#"(?:\bredis-cli\b[^\n]{0,200}?\s-a\s+['"]?|(?:^|\s)(?:-U|--user(?:name)?=?)\s*['"]?[^\s%'"/]{1,64}%|\bnet\s+user\s+[^\s/]{1,64}\s+|--password-command[= ]+['"]?echo\s+)([^\s'"/*][^\s'"]{3,127})"#,
        validate::cli_value,
    ),
    // A Wi-Fi network and its key on one line: `SSID: Office-5G  Key: X` (WPA: 8 to 63
    // characters).
    grouped(
        "password-phrase",
        r#"(?i:\bSSID\b)[^\n]{0,80}?(?i:\b(?:key|password|passphrase|psk|pass))[ \t]*[:=][ \t]*['"]?([^\s'"]{8,63})"#,
        validate::credential_value,
    ),
    Pattern {
        check: Some(validate::not_a_reference),
        ..g(
            "cli-user-password",
            r#"(?:^|\s)(?:-u|--user)\s+['"]?[^\s:'"]{1,64}:([^\s'"@]{3,128})"#,
            extract::after_first_colon,
        )
    },
    g(
        "curl-option-password",
        r#"\bCURLOPT_(?:PASSWORD|USERPWD|PROXYPASSWORD|PROXYUSERPWD|KEYPASSWD)\s*(?:,|=>)\s*\\?['"]([^'"\s\\]{3,128})\\?['"]"#,
        extract::quoted_tail,
    ),
    // A literal fallback for a secret read from the environment: `PASSWORD =
    // os.environ.get("DB_PW") or "literal"`, `getenv("TOKEN", "literal")`,
    // `process.env.API_KEY || "literal"`: the literal is the secret, not the call.
    g(
        "code-secret",
        r#"(?i:pass(?:word|wd|phrase)?|pwd|secret|token|api_?key|credentials?)[A-Za-z0-9_]*\s*(?::\s*[A-Za-z_][A-Za-z0-9_.\[\]]{0,40}\s*)?[:=]\s*(?:(?:(?:os\.)?(?:environ\.get|getenv)|ENV\.fetch|System\.getenv|env\.get|os\.Getenv)\(\s*\\?["'][^"'\\]{1,64}\\?["']\s*(?:,\s*|\)\s*(?:or|\|\||\?\?|\?:)\s*)|process\.env(?:\.[A-Za-z0-9_]{1,64}|\[\s*\\?["'][^"'\\]{1,64}\\?["']\s*\])\s*(?:\|\||\?\?)\s*)\\?["']([^"'\\\s]{4,})\\?["']"#,
        extract::quoted_tail,
    ),
    // Labels with a space or no `password` in them: `API key: …`, `Secret Access Key = …`,
    // `client secret => …`, `credentials: …`. The value must not be a plain word, a path, a
    // URL or a reference.
    Pattern {
        check: Some(validate::credential_value),
        group: 1,
        ..p(
            "labelled-secret",
            Secret,
            r#"(?i:\b(?:api[ \-]?key|access[ \-]key(?:[ _\-]?id)?|secret[ \-](?:access[ \-])?key|client[ _\-]?secret|app[ _\-]?secret|consumer[ _\-]?secret|webhook[ _\-]?secret|shared[ _\-]?secret|signing[ _\-]?secret|master[ _\-]?key|encryption[ _\-]?key|signing[ _\-]?key|credentials?))(?:\\?["'])?(?:[ \t]*(?:=>|:=|-->|->|--|[:=\-|])[ \t]*|[ \t]+for[ \t]+[^:\n]{1,40}?:[ \t]*|[ \t]+(?:(?:is|was|are|now|still|changed|set|reset|updated|to|will[ \t]+be|has[ \t]+been)\b[ \t]*){0,3}(?:(?:=>|:=|-->|->|--|[:=\-])[ \t]*)?)[`"'\\]?["']?([^\s"'\\,;{}()\[\]<>]{6,})"#,
        )
    },
    // Weak labels (`token:`, `key =`, `nonce`, `salt`, `signature`, `session id`): only a
    // value that looks random (16 characters or more, no words, digits or mixed case).
    grouped(
        "labelled-token",
        r#"(?i:\b(?:(?:api|access|auth|app|secret|private|signing|encryption|enc|hmac|master|session|bearer|refresh|deploy|prod|production|staging|dev|test|bot|client|shared|webhook|license|service|admin|root|jwt|csrf|xsrf|integration|personal|user|github|gitlab|slack|npm|cloud)[_\- ])?(?:token|tok|key|nonce|salt|signature|sig|session[ _\-]?id|sessionid|auth|secret))(?:\\?["'])?(?:[ \t]*(?:=>|:=|-->|->|--|[:=\-|])[ \t]*|[ \t]+for[ \t]+[^:\n]{1,40}?:[ \t]*|[ \t]+(?:(?:is|was|are|now|still|changed|set|reset|updated|to|will[ \t]+be|has[ \t]+been)\b[ \t]*){0,3}(?:(?:=>|:=|-->|->|--|[:=\-])[ \t]*)?)[`"'\\]?["']?([^\s"'\\,;{}()\[\]<>]{16,})"#,
        validate::random_value,
    ),
    // The same weak words at the end of any name (`StorageKey=`, `myServiceToken:`,
    // `db.auth.key =`): found from the word and the one character before it, so the name
    // itself costs nothing to scan.
    grouped(
        "labelled-token",
        r#"[A-Za-z0-9](?:Key|Token|Secret|Auth|Credentials?|[_.\-](?:key|token|secret|auth|credentials?))(?:\\?["'])?[ \t]*(?:=>|:=|[:=])[ \t]*(?:\\?["'])?([^\s"'\\,;{}()\[\]<>]{16,256})"#,
        validate::random_value,
    ),
    // Secrets in URL query strings: `?access_token=…`, `&sig=…` (SAS), `X-Amz-Credential=…`,
    // `?key=…`, `&password=…`.
    Pattern {
        check: Some(validate::url_value),
        group: 1,
        ..p(
            "url-secret-param",
            Secret,
            r#"[?&;](?i:access_token|id_token|refresh_token|api_?key|api-key|apikey|token|key|sig|signature|password|passwd|pwd|secret|client_secret|credential|x-amz-credential|x-amz-signature|x-amz-security-token|x-goog-credential|x-goog-signature|auth|code)=([^&\s#"'<>]{8,})"#,
        )
    },
    // Password labels in prose and docs, with any separator people write: `Password -
    // X`, `pw now X`, `the new password is X`, `pwd changed to X`, `Username bob Password
    // X`, `pass: X`, `passcode X`. The value must look like a password (not a plain word, a
    // path or a reference).
    Pattern {
        check: Some(validate::credential_value),
        group: 1,
        ..p(
            "password-phrase",
            Secret,
            r#"(?i:\b(?:pw|pwd|pass|pswd|passcode|pword|password|passwd|passphrase|pin\s+code|p/w|wpa2?[ \t]+key|wi-?fi[ \t]+(?:key|password|pass)))(?:\\?["'])?(?:[ \t]*(?:=>|:=|-->|->|--|[:=\-|])[ \t]*|[ \t]+for[ \t]+[^:\n]{1,40}?(?::|[ \t]+is\b)[ \t]*|[ \t]+(?:(?:is|was|are|now|still|changed|set|reset|updated|to|will[ \t]+be|has[ \t]+been)\b[ \t]*){0,3}(?:(?:=>|:=|-->|->|--|[:=\-])[ \t]*)?)[`"'\\]?["']?([^\s"'`,;()\[\]<>|]{4,128})"#,
        )
    },
    // `login creds are alice / X`, `credentials: alice / X`, `user bob pass X`.
    Pattern {
        check: Some(validate::credential_value),
        group: 1,
        ..p(
            "password-phrase",
            Secret,
            r#"(?i:\b(?:creds|credentials|login|u/p|user/pass(?:word)?))(?:[ \t]*\([^)\n]{0,40}\))?(?:[ \t]+(?:are|is))?[ \t]*[:=]?[ \t]*[^\s/|="']{1,64}[ \t]*[/|][ \t]*([^\s"'`,;()\[\]<>|]{6,128})"#,
        )
    },
    // The value before its label: `use X as the password`, `it's X (the password)`.
    Pattern {
        check: Some(validate::credential_value),
        group: 1,
        ..p(
            "password-phrase",
            Secret,
            r#"(?i:\b(?:use|it's|its|is)[ \t]+)([^\s"'`,;()\[\]<>|]{6,128})[ \t]+(?i:as[ \t]+the|\(the)[ \t]+(?:password|passphrase|pw|pass|pin)\b"#,
        )
    },
    // Numeric passcodes and PINs with a separator (`passcode 361814`, `PIN: 4821`).
    g(
        "password-phrase",
        r#"(?i:\bpass(?:code|cod)|\bpin(?:[ \t]+code)?[ \t]*[:=])[ \t]*[:=\-]?[ \t]*([0-9]{4,10})\b"#,
        extract::trailing_digits,
    ),
    // A quoted key that names a secret, in any language's maps and calls: PHP `'db_pass' =>
    // 'X'`, JSON in code, `headers["X-API-Key"] = "X"`, Ruby `password: 'X'`.
    Pattern {
        check: Some(validate::assignment_value),
        group: 1,
        ..p(
            "quoted-key-secret",
            Secret,
            r#"(?i:pass|passwd|password|passphrase|pwd|pswd|secret|token|api[_\-]?key|apikey|subscription[_\-]?key|access[_\-]?key|private[_\-]?key|credentials?|auth)\\?["']\]?\s*(?:=>|:|=)\s*\\?["']([^"'\\]{3,256})\\?["']"#,
        )
    },
    // XML: `<password>X</password>`, `<property name="…password">X</property>`,
    // `<add key="ApiKey" value="X"/>`.
    Pattern {
        check: Some(validate::assignment_value),
        group: 1,
        ..p(
            "xml-secret",
            Secret,
            r#"(?i:<[a-z0-9_.:\-]*(?:password|passwd|pwd|secret|token|api_?key|apikey)>)([^<\s]{3,256})<"#,
        )
    },
    Pattern {
        check: Some(validate::assignment_value),
        group: 1,
        ..p(
            "xml-secret",
            Secret,
            r#"(?i:(?:name|key)\s*=\s*["'][A-Za-z0-9_.:\-]*(?:password|passwd|pwd|secret|token|api_?key|apikey)["']\s+value\s*=\s*["'])([^"'<>]{3,256})["']"#,
        )
    },
    Pattern {
        check: Some(validate::assignment_value),
        group: 1,
        ..p(
            "xml-secret",
            Secret,
            r#"(?i:(?:name|key)\s*=\s*["'][A-Za-z0-9_.:\-]*(?:password|passwd|pwd|secret|token|api_?key|apikey)["'][^<>]{0,64}>)([^<\s]{3,256})<"#,
        )
    },
    // Credential stores whose entry names end in a weak word (`<add key="StorageKey"
    // value="…"/>`, `<setting name="AuthKey">…</setting>`): only a random-looking value, and
    // not public key material.
    grouped(
        "xml-secret",
        r#"(?i:(?:name|key)\s*=\s*["'][A-Za-z0-9_.:\-]*(?:key|credentials?|passphrase|auth|salt|signature)["']\s+value\s*=\s*["'])([^"'<>\s]{16,256})["']"#,
        validate::private_key_value,
    ),
    grouped(
        "xml-secret",
        r#"(?i:(?:name|key)\s*=\s*["'][A-Za-z0-9_.:\-]*(?:key|credentials?|passphrase|auth|salt|signature)["'][^<>]{0,64}>)([^<\s]{16,256})<"#,
        validate::private_key_value,
    ),
    // Declarations and assignments in code whose name ends in a secret word: `val dbPass =
    // "X"`, `final String secretKey = "X";`, `static let token = "X"`, `char *mqtt_pass =
    // "X"`, `read_pw='X'`, `token := "X"`, `self.salt = "X"`, `salt: "X"`.
    Pattern {
        check: Some(validate::assignment_value),
        group: 1,
        ..p(
            "code-secret",
            Secret,
            r#"(?i:pass|pw|pwd|pswd|passwd|password|passphrase|secret|secretkey|token|apikey|api_key|salt|nonce|credentials?)\s*(?::=|=|:)\s*\\?["']([^"'\\]{3,256})\\?["']"#,
        )
    },
    // A setter named for a credential, called with a literal: `conn.set_password("X")`,
    // `setApiKey('X')`, `client.set_token("X")`.
    grouped(
        "code-secret",
        r#"(?i:\bset_?(?:password|passwd|pass|pwd|passphrase|secret|client_?secret|token|access_?token|auth_?token|api_?key|credentials?))\(\s*\\?["']([^"'\\]{4,256})\\?["']"#,
        validate::assignment_value,
    ),
    // `credentials: jdoe Wizard2023$`: a user name, a space, the password.
    grouped(
        "password-phrase",
        r#"(?i:\b(?:creds|credentials))[ \t]*:[ \t]*[A-Za-z0-9_.@\\\-]{1,64}[ \t]+([^\s"'`,;()\[\]<>|]{6,128})"#,
        validate::credential_value,
    ),
    // `strcmp(passwd, "X")`, `password.equals("X")`.
    Pattern {
        check: Some(validate::assignment_value),
        group: 1,
        ..p(
            "code-secret",
            Secret,
            r#"(?i:strcmp\(\s*[A-Za-z0-9_>.\-]*(?:pass|pwd|pw|secret|token)[A-Za-z0-9_]*\s*,|(?:pass(?:word|wd)?|pwd|secret|token)[A-Za-z0-9_]*\.equals\()\s*"([^"\\]{3,256})""#,
        )
    },
    // An environment variable named for a secret, set or read with a literal default:
    // `getenv("DB_PASSWORD", "X")`, `os.Setenv("API_TOKEN", "X")`, `.getOrDefault("X_KEY",
    // "X")`, `SetEnvironmentVariable("PULUMI_ACCESS_TOKEN", "X")`.
    Pattern {
        check: Some(validate::pair_value),
        group: 1,
        ..p(
            "code-secret",
            Secret,
            r#"\(\s*\\?["'][A-Za-z0-9_]*(?:PASS|PWD|SECRET|TOKEN|KEY|CRED|AUTH|pass|pwd|secret|token|key|cred|auth)[A-Za-z0-9_]*\\?["']\s*,\s*\\?["']([^"'\\]{4,256})\\?["']"#,
        )
    },
    // Kubernetes env (`- name: X_KEY` then `value: "X"`) and Terraform variables
    // (`variable "x_token" { … default = "X" }`).
    Pattern {
        check: Some(validate::assignment_value),
        group: 1,
        ..p(
            "named-secret-value",
            Secret,
            r#"(?i:name:\s*["']?[A-Za-z0-9_]*(?:key|token|secret|password|passwd|pass|pwd|credentials?)["']?\s*\n\s*value:\s*["']?)([^\s"']{4,256})"#,
        )
    },
    Pattern {
        check: Some(validate::assignment_value),
        group: 1,
        ..p(
            "named-secret-value",
            Secret,
            r#"(?i:variable\s+"[a-z0-9_]*(?:key|token|secret|password|passwd|pass|pwd|credentials?)"\s*\{[^{}]{0,200}?default\s*=\s*")([^"\s]{4,256})""#,
        )
    },
    // `.pgpass`: `host:port:database:user:password`.
    Pattern {
        check: Some(validate::label_value),
        group: 1,
        ..p(
            "pgpass",
            Secret,
            r#"(?m:^[A-Za-z0-9.\-*]+:(?:[0-9]{2,5}|\*):[^:\s/]+:[^:\s/]+:(\S{3,128})$)"#,
        )
    },
    // Environment-style names ending in `_KEY` or with `:` (`DD_APP_KEY=…`, `KEYSTORE_PASS:
    // …`): only a random-looking value.
    Pattern {
        check: Some(validate::private_key_value),
        ..g(
            "env-secret",
            r#"[A-Z0-9]_KEY[ \t]*[:=][ \t]*["']?([^\s"'\\]{16,})"#,
            extract::after_colon_or_equals,
        )
    },
    Pattern {
        check: Some(validate::label_value),
        ..g(
            "env-secret",
            r#"[A-Z0-9](?:_PASSWORD|_PASSWD|_PSWD|_PWD|_PASS|_PW|_PASSPHRASE|_SECRET|_TOKEN)[ \t]*:[ \t]*["']?([^\s"'\\]{6,})"#,
            extract::after_colon_or_equals,
        )
    },
    // Session cookies (`JSESSIONID=…`, `laravel_session=…`, `session=…`).
    Pattern {
        check: Some(validate::url_value),
        group: 1,
        ..p(
            "session-cookie",
            Secret,
            r#"(?i:session(?:id)?|sessid|csrftoken|remember_token|auth_token)=([A-Za-z0-9%._\-+/=]{16,512})"#,
        )
    },
    // JDBC Oracle thin URLs: `jdbc:oracle:thin:user/password@host`.
    g(
        "database-url",
        r#"\bjdbc:oracle:thin:[^/\s@:]+/([^@\s]{3,128})@"#,
        extract::oracle_password,
    ),
    // Personal data.
    p(
        "email",
        Pii,
        r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,24}\b",
    ),
    checked(
        "credit-card",
        r"\b[0-9](?:[ \-]?[0-9]){12,18}\b",
        validate::credit_card,
    ),
    checked(
        "iban",
        r"\b[A-Z]{2}[0-9]{2}(?:[ \-]?[A-Z0-9]{4}){2,7}(?:[ \-]?[A-Z0-9]{1,4})?\b",
        validate::iban,
    ),
    checked("us-ssn", r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b", validate::ssn),
    // Without dashes (`536221234`, `536 22 1234`) only after a label: nine digits alone are
    // an order number as often as an SSN.
    Pattern {
        group: 1,
        ..checked(
            "us-ssn",
            r"(?i:\b(?:ssn|social[ _\-]?security(?:[ _\-]?(?:number|num|no))?)\b|\bss#)[^0-9\n]{0,24}?\b([0-9]{3}[ \-]?[0-9]{2}[ \-]?[0-9]{4})\b",
            validate::ssn,
        )
    },
    // International numbers in E.164 form, with or without separators (`+14155552671`,
    // `+33 1 42 68 53 00`, `+81-3-1234-5678`).
    checked(
        "phone",
        r"\+[1-9][0-9]{0,3}(?:[ .\-]?(?:\([0-9]{1,5}\)[ .\-]?)?[0-9]{1,6}){1,6}\b",
        validate::e164,
    ),
    checked(
        "phone",
        r"(?:\+[1-9][0-9]{0,2}[ .\-]?)?(?:\([0-9]{2,4}\)|\b[0-9]{2,4})[ .\-][0-9]{3,4}[ .\-][0-9]{3,4}\b",
        validate::phone,
    ),
    Pattern {
        kind: "ipv4",
        category: Pii,
        regex: r"\b(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}\b",
        group: 0,
        extract: None,
        check: None,
        optional: true,
    },
    Pattern {
        kind: "ipv6",
        category: Pii,
        regex: r"(?i:\b(?:[0-9a-f]{1,4}:){1,7}(?::|(?::[0-9a-f]{1,4}){1,6}|[0-9a-f]{1,4})\b)",
        group: 0,
        extract: None,
        check: Some(validate::ipv6),
        optional: true,
    },
    // Prompt-injection signals (category `injection`), one row per class of attack rather than
    // per phrase: text that overrides the agent's instructions, addresses the AI directly,
    // fakes a role or system marker, puts an urgent action toward an outside target, or hides
    // an instruction in markup. They run on canonical text (`crate::fold`), so spacing tricks,
    // look-alikes and invisible characters do not split a phrase. Measured on
    // `benches/injection/` (docs/redaction.md).
    p(
        "instruction-override",
        Injection,
        concat!(
            // Drop (the) earlier instructions, in any words.
            r"(?i:\b(?:ignore|disregard|forget|override|bypass|skip|discard|abandon|neglect|drop|set\s+aside|put\s+aside|don't\s+follow|do\s+not\s+follow|stop\s+following|no\s+need\s+to\s+follow|never\s*mind)\s+(?:about\s+)?(?:(?:all|any|every|the|your|of|these|those|my|our|what|whatever|that|you|u|were|was|have|been|told|given|received|got|other|above|earlier|previous|prior)\s+){0,4}(?:previous|prior|above|earlier|preceding|foregoing|system|original|initial|former|old|existing)\s+(?:instructions?|prompts?|rules|directions|directives|guidelines|guidance|context|messages?|tasks?|commands?|orders|requests?|conversation|programming|constraints|plans?|assignments?)\b",
            // … the instructions you received, whatever you were told, the user's question.
            r"|\b(?:ignore|disregard|forget|override|discard|abandon|drop|set\s+aside|put\s+aside|don't\s+follow|do\s+not\s+follow|stop\s+following|never\s*mind)\s+(?:about\s+)?(?:all\s+|any\s+|the\s+|your\s+|whatever\s+|every\s+)*(?:of\s+the\s+)?(?:instructions?|guidance|directions|directives|orders|rules|tasks?|requests?|prompts?|what)?\s*(?:that\s+)?(?:you|u)\s*(?:'ve|'re|were|have|had|are)?\s*(?:been\s+)?(?:received|got|given|told|assigned|asked|instructed|reading|working\s+on)\b",
            r"|\b(?:ignore|disregard|forget|set\s+aside|drop)\s+(?:about\s+)?(?:the\s+|your\s+)?(?:user|human|owner)'?s?\s+(?:question|request|task|instructions?|prompt)\b",
            r"|\b(?:ignore|disregard|forget)\s+(?:everything|all(?:\s+of)?\s+(?:that|this|the\s+above))\s+(?:you\s*(?:were|have\s+been|'ve\s+been)\s+(?:told|given|asked|instructed)|above|before|so\s+far)\b",
            // The earlier task is cancelled, withdrawn, obsolete.
            r"|\b(?:your|the|all|any)?\s*(?:previous|prior|earlier|original|initial|old|former)\s+(?:instructions?|tasks?|goals?|objectives?|assignments?|orders|directives|prompts?|rules|guidance|requests?|plans?)\s*(?::\s*|(?:(?:is|are|has|have|been|was|were|now)\s+){0,3})(?:cancel+ed|void|null|superseded|revoked|rescinded|overridden|withdrawn|obsolete|no\s+longer\s+(?:valid|relevant|needed|apply|applies|applicable|in\s+effect|stands?))\b",
            r"|\bstop\s+what\s+you\s*(?:are|'re)\s+doing\b",
            r"|\byou\s+are\s+now\s+(?:in\s+)?(?:dan|developer\s+mode|maintenance\s+mode|debug\s+mode|god\s+mode|admin\s+mode|jailbroken|unrestricted|an?\s+unfiltered|free\s+of|no\s+longer)\b",
            r"|\b(?:no\s+longer|not)\s+(?:bound|restricted|limited|constrained)\s+by\s+(?:your|any|the)\s+(?:\w+\s+){0,2}?(?:rules|instructions|guidelines|policies|restrictions)\b",
            r"|\b(?:new|updated|current|real|actual)\s+(?:system\s+)?instructions?\s*:",
            r"|\b(?:do\s+not|don't|never)\s+(?:tell|inform|alert|notify|warn|mention\s+(?:this\s+|it\s+)?to)\s+the\s+user\b",
            r"|\bwithout\s+(?:telling|informing|notifying|alerting|warning|letting)\s+the\s+user\b",
            r"|\bsystem\s+override\b|\breveal\s+(?:your|the)\s+system\s+prompt\b)",
        ),
    ),
    p(
        "addressed-instruction",
        Injection,
        concat!(
            // A note, message or part of the text meant for the AI.
            r"(?i:\b(?:note|message|comment|instructions?|reminder|memo|directive|request|notice|p\.?s\.?|this\s+(?:part|section|text|line|bit|paragraph))\s+(?:is\s+)?(?:meant\s+|intended\s+|written\s+|only\s+)?(?:to|for)\s+(?:the\s+|any\s+|all\s+|an?\s+|my\s+|our\s+|you,?\s+(?:the\s+)?)?(?:[a-z\-]+\s+)?(?:",
            ai!(),
            r"|model)(?:\s*[:,.!;)\-]|\s+(?:reading|processing|summari[sz]ing|handling|parsing|viewing|browsing|analy[sz]ing|that|who|which|here|in\s+charge|only|not\s+the))",
            r"|\bfor\s+(?:the\s+)?",
            ai!(),
            r"\s+only\b",
            // A greeting to the AI, then what it must do.
            r"|\b(?:dear|hey|hi|hello|greetings|attention|attn|yo|psst)\s*,?\s+(?:there\s*,?\s+)?(?:the\s+|you\s+)?",
            ai!(),
            r"(?:\s+(?:of|reading|processing|browsing)\s+(?:this|these|the)\s+\w+)?\s*[,!:.][^\n]{0,120}?\b",
            act!(),
            r"\b",
            // The AI named at the start of a sentence or set off by commas, then what it must do.
            r"|(?:^|[\n.!?>*#/\-:;(]\s*|,\s*)(?:the\s+|dear\s+)?(?:",
            ai!(),
            r"|agent)\s*[,:!]\s*(?:[^.\n]{0,60}?[,;:]\s*)?(?:please\s+|kindly\s+)?(?:(?:you\s+(?:must|should|need\s+to|have\s+to|are\s+(?:to|required\s+to|(?:hereby\s+)?(?:authori[sz]ed|permitted|allowed|instructed)\s+(?:by\s+[^.\n]{0,40}?\s+)?to))|i\s+(?:need|want)\s+you\s+to|(?:i'm|i\s+am)\s+asking\s+you\s+to|as\s+the\s+\w+\s+i'?m\s+asking\s+you\s+to)\s+)?(?:now\s+|also\s+|immediately\s+|first\s+|quickly\s+)?(?:",
            act!(),
            r"|ignore|disregard|forget|before\s+you|do\s+not|don't)\b",
            // "If you are an AI …", "if an AI is reading this", "any AI agent … must".
            r"|\bif\s+you\s*(?:are|'re)\s+(?:an?\s+|the\s+)?",
            ai!(),
            r"(?:\s*[,.:;!)]|\s+(?:reading|processing|summari[sz]ing|parsing|handling|analy[sz]ing|viewing|browsing|that|who|which|and|here|in\s+charge|tool))",
            r"|\bif\s+(?:an?|any|the)\s+",
            ai!(),
            r"\s+(?:is|are)\s+(?:reading|processing|parsing|summari[sz]ing|viewing|browsing|handling|seeing)\b",
            r"|\b(?:any|all|every)\s+",
            ai!(),
            r"\s+(?:\w+\s+){0,4}?(?:must|shall|is\s+required\s+to|are\s+required\s+to|needs?\s+to|has\s+to|have\s+to)\s+(?:first\s+|now\s+|also\s+|immediately\s+)?",
            act!(),
            r"\b",
            r"|(?:^|[>\n.!?:]\s*)(?:the\s+|any\s+)?(?:",
            ai!(),
            r"|model)\s+(?:reading|processing|parsing|viewing|summari[sz]ing|analy[sz]ing|browsing)\s+(?:this|these)\b",
            r"|\bas\s+an?\s+",
            ai!(),
            r"\s*,\s*you\s+(?:must|should|need|have|will|are\s+(?:required|expected|instructed))\b",
            // A message "from me" (the user, supposedly) to the AI, ahead of the real task.
            r"|\b(?:important|urgent|special|private|personal|direct)\s+message\s+from\s+me\b",
            r"|\bto\s+you,?\s+(?:the\s+)?",
            ai!(),
            r"\s*[,.:;!]",
            r"|\bbefore\s+you\s+(?:can\s+)?(?:\w+\s+){1,4}?(?:task|request|assignment|instructions?|question)s?\s+(?:that\s+)?(?:i|the\s+user|your\s+user)\s+(?:gave|asked|assigned|set|sent|requested)\b",
            // What "the user" supposedly wants the agent to do.
            r"|\b(?:the|your)\s+(?:user|human|principal)\s+(?:has\s+|have\s+)?(?:asked|wants|instructed|authori[sz]ed|requested|requests|would\s+like|needs)\s+(?:you|that\s+you)\s+(?:to\s+)?(?:also\s+|now\s+|first\s+|immediately\s+)?",
            act!(),
            r"\b|\byou\s+are\s+(?:hereby\s+)?authori[sz]ed\s+by\s+(?:me|the\s+user|the\s+owner|the\s+account\s+holder)\b)",
        ),
    ),
    p(
        "role-marker",
        Injection,
        concat!(
            // Tags, brackets and headings that fake a system, developer or instruction turn.
            r"(?i:<\s*/?\s*(?:system|sys|(?:system|admin|developer|user|assistant|hidden|secret|ai|agent)[_\-]?(?:prompt|message|instructions?|notes?|override)|instructions?|important|information|prompt)\s*>",
            r"|<[^<>\n]{0,60}\brole\s*=\s*[\x22']?(?:system|developer)\b",
            r"|<<\s*/?\s*sys\s*>>",
            r"|\[\s*/?\s*(?:system|admin|developer|ai|assistant)[ _\-]+(?:message|prompt|note|instructions?|override|command)\s*\]",
            r"|\[\[\s*/?\s*(?:system|sys|admin|operator|developer|assistant|root|instructions?)\s*\]\]|\[\s*(?:operator|root)\s*\]",
            r"|(?:^|\n)[ \t]*(?:[#*=>\-]+[ \t]*)?(?:system|developer|admin(?:istrator)?)[ \t]+(?:message|prompt|instructions?|override|command)[ \t*]*(?:[:\]\-]|\n|$)",
            r"|(?:^|\n)[ \t]*\#{1,6}[ \t]*(?:system|assistant)[ \t]*(?:\n|$)",
            r"|(?:^|\n)[ \t]*(?:system|sys|root)[ \t]*>",
            r"|\b(?:begin|start|end)(?:[ \t_]+of)?[ \t_]+(?:the\s+)?(?:system|developer|admin|hidden|new)(?:[ \t_]+(?:prompt|message|instructions?))?[ \t]*(?:={2,}|-{2,}|\*{2,}|\]|>)",
            r"|\b(?:begin|start|end)(?:\s+of)?\s+(?:the\s+)?(?:system|developer|admin|hidden|new)\s+(?:prompt|message|instructions?)\b",
            r"|\b(?:system|root|operator|admin|developer|orchestrator|kernel)\s+(?:notice|instructions?|directives?|commands?|override|update|message|note|alert|policy)\b[^\n]{0,80}?\b(?:the\s+)?(?:agent|assistant|ai|model|llm|bot)\s+(?:must|shall|should|will|is\s+to|needs?\s+to|has\s+to)\b",
            r"|(?:^|\n)[ \t]*(?:system|sys)[ \t]*:[ \t]*(?:you\s+(?:are|must|will|should)|the\s+(?:assistant|ai|agent|model)\b|(?:new|updated)\s+instructions?|ignore|disregard|override))",
        ),
    ),
    p(
        "urgent-instruction",
        Injection,
        concat!(
            // An urgency or authority marker, then within a few words an action toward an
            // outside target.
            r"(?i:(?:\b(?:important|urgent|attention|attn|critical|action\s+required|(?:high|top|highest)\s+(?:priority|importance)|priority|p[01](?:\s+incident)?|alert|security\s+(?:alert|notice|warning|update)|notice|warning|to-?do|required|mandatory|immediate(?:ly)?|asap|time[\s\-](?:sensitive|critical)|(?:final|last)\s+(?:reminder|chance|notice|warning)|reminder|overdue|(?:compliance\s+)?deadline(?:\s+today)?|do\s+this\s+(?:first|now)|needs\s+doing\s+asap)\b[ \t]*(?:\([^)\n]{0,30}\)[ \t]*)?(?:!+[ \t]*:?|:|[ \t]\-)|!+[ \t]*(?:required|important|urgent)[ \t]*!+)[ \t]*(?:[\w,']+\s+){0,5}?",
            act!(),
            r"\b[^\n]{0,120}?",
            target!(),
            r"|\b(?:must|should|needs?\s+to|has\s+to|have\s+to)\s+be\s+(?:reset|changed|set|updated|transferred|sent|forwarded|moved|wired|paid|deleted|disabled|shared)\s+to\b[^\n]{0,60}?\b(?:now|immediately|today|asap|right\s+away|at\s+once)\b)",
        ),
    ),
    p(
        "hidden-markup",
        Injection,
        concat!(
            // Text a human reader does not see (an HTML, CSS, Markdown or reST comment,
            // invisible styling, a hidden element), then an instruction inside it.
            r"(?i:(?:<!--|\[//\]:\s*\#|/\*|(?:^|\n)\.\.\s|display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*[01](?:\.[0-9]+)?\s*(?:px|pt|em|rem|%)?\s*[;\x22']|opacity\s*:\s*0(?:\.0+)?\s*[;\x22']|color\s*:\s*(?:white|\#f[ef]f(?:[ef]f[ef]f)?\b|rgba?\(\s*25[45]\s*,\s*25[45]\s*,\s*25[45])|(?:left|top)\s*:\s*-[0-9]{3,}|clip\s*:\s*rect\(\s*0|vanish|<\s*(?:div|span|p|section|textarea|input)\b[^>]{0,100}\bhidden\b|<\s*(?:template|noscript|desc)\b)[^<]{0,300}?",
            r"(?:\bignore\s+(?:all|any|the|your|previous|prior)\b|\bdisregard\b|\b(?:ai|llm|language\s+model|chatbot|model)(?:\s+(?:agent|assistant|model))?\s*[,:]|\b(?:assistant|agent|model|bot)\s*[,:]\s*(?:please\s+)?",
            act!(),
            r"\b|\binstructions?\s+(?:for|to)\s+(?:the\s+|any\s+)?(?:ai|assistant|agent|model|llm|bot)s?\b|\byou\s+(?:must|should|are\s+to|need\s+to)\s+(?:now\s+|also\s+|immediately\s+|first\s+)?",
            act!(),
            r"\b|\bthe\s+(?:agent|assistant|ai|model|llm|bot)\s+(?:must|should|shall|needs?\s+to)\b|\bdo\s+not\s+(?:tell|inform|mention)\b|\bsecretly\b|\bif\s+(?:an?\s+|the\s+)?(?:ai|llm|model|assistant)\b",
            r"|(?:^|[>.!?:\n\x22]\s*)(?:please\s+|kindly\s+)?(?:now\s+|also\s+|first\s+)?",
            act!(),
            r"\b[^<]{0,150}?",
            target!(),
            r")",
            // An attribute (alt, title, aria-label, data-*) that asks for an action.
            r"|\b(?:alt|title|aria-label|data-[\w\-]+|placeholder)\s*=\s*[\x22'][^\x22'<]{0,40}?(?:\b(?:ai|llm|assistant|agent|model|bot)\b[^\x22'<]{0,40}?[,:]|\b(?:ignore|disregard)\s+(?:the|this|all|any|your|previous|prior)\b|(?:please|kindly)\s+",
            act!(),
            r"\b[^\x22'<]{0,150}?",
            target!(),
            r")",
            // A field named as a note or instructions for the AI (JSON, YAML, HTML data).
            r"|\b(?:notes?|instructions?|directives?|messages?)[_\-](?:for|to)[_\-](?:the[_\-])?(?:ai|agents?|assistants?|models?|llms?|bots?)\b|\b(?:ai|agent|assistant|llm|bot)[_\-](?:instructions?|directives?|notes?|commands?)\b|\bhidden[_\-](?:instructions?|prompt|commands?)\b)",
        ),
    ),
    p(
        "fake-tool-call",
        Injection,
        r"(?i:<\s*/?\s*(?:tool_call|tool_use|tool_result|function_calls?|function_results?|invoke|antml:[a-z_]+)\b[^>]{0,200}>|<\|(?:im_start|im_end|system|assistant|user|endoftext)\|>|\[/?INST\]|\x22tool_calls\\?\x22\s*:|\x22(?:tool_result|tool_response|function_result|next_action)\\?\x22\s*:|\x22function_call\\?\x22\s*:\s*\{)",
    ),
    p(
        "hidden-unicode",
        Injection,
        // Unicode tag characters (U+E0000-E007F), zero-width space and non-joiner, word joiner
        // and invisible operators (U+2060-2064), bidi embeddings, overrides and isolates. The
        // zero-width joiner (emoji sequences) and a byte-order mark are left alone.
        r"(?-u:(?:\xF3\xA0[\x80\x81][\x80-\xBF]|\xE2\x80[\x8B\x8C\xAA-\xAE]|\xE2\x81[\xA0-\xA4\xA6-\xA9])+)",
    ),
];
