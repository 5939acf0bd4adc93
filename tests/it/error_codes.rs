//! `docs/http-api.md` holds the error-code table exactly as `toolgate::codes::Code` defines
//! it: every code, its HTTP status, where it appears, what it means and its hint. Regenerate
//! it with `TOOLGATE_BLESS=1 cargo test --test it error_codes`.

use crate::helpers::repo;
use toolgate::codes::Code;

const BEGIN: &str = "<!-- error-codes:begin -->";
const END: &str = "<!-- error-codes:end -->";

fn table() -> String {
    let mut out =
        String::from("| code | HTTP | where | meaning | what to do |\n|---|---|---|---|---|\n");
    for c in Code::ALL {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            c.as_str(),
            c.status(),
            c.place(),
            c.meaning(),
            c.hint().replace('|', "\\|")
        ));
    }
    out
}

#[test]
fn the_documented_error_table_is_the_code_table() {
    let path = repo().join("docs/http-api.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        panic!("docs/http-api.md lacks the {BEGIN} … {END} markers");
    };
    let documented = &text[b + BEGIN.len()..e];
    let want = format!("\n{}", table());
    if documented != want {
        if std::env::var_os("TOOLGATE_BLESS").is_some() {
            let fresh = format!("{}{want}{}", &text[..b + BEGIN.len()], &text[e..]);
            std::fs::write(&path, fresh).unwrap();
            return;
        }
        panic!(
            "docs/http-api.md's error table is not the one src/codes.rs defines; run \
             TOOLGATE_BLESS=1 cargo test --test it error_codes\nwant:\n{want}"
        );
    }
}
