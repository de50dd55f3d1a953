//! The documents that promise things to clients and operators agree with the code: every
//! status and error code of the API table (`docs/api.md`) is in the generated OpenAPI
//! description, the configuration table (`docs/configuration.md`) is exactly what `seckill
//! --help` says, and each Chinese page (README.zh-CN.md, `docs/zh-CN/`) keeps its English
//! page's commands, figures and tables; the README stays short and reaches every page.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use utoipa::OpenApi;

/// A document of the repository, by its path from the root.
fn doc(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The rows of the table that follows `heading` in a document: cells, trimmed.
fn table_after(readme: &str, heading: &str) -> Vec<Vec<String>> {
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("the document has {heading}"));
    readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and rule
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// `(status, codes)` as the API table writes them: `409 \`sold_out\` / \`purchase_limit\``.
fn statuses(cell: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = None;
    for (i, part) in cell.split('`').enumerate() {
        if i % 2 == 1 {
            if let Some(status) = &current {
                found
                    .entry(String::clone(status))
                    .or_default()
                    .insert(part.to_string());
            }
            continue;
        }
        for word in part.split(|c: char| !c.is_ascii_digit()) {
            if word.len() == 3 {
                found.entry(word.to_string()).or_default();
                current = Some(word.to_string());
            }
        }
    }
    found
}

#[test]
fn every_status_and_error_code_in_the_api_table_is_in_the_openapi_description() {
    let api = serde_json::to_value(seckill::http::openapi::ApiDoc::openapi()).unwrap();
    assert_eq!(api["openapi"], "3.1.0");
    let readme = doc("docs/api.md");
    let rows = table_after(&readme, "# HTTP API");
    assert!(rows.len() >= 15, "the API table: {} rows", rows.len());
    for row in rows {
        let request = row[0].trim_start_matches('`');
        let (method, rest) = request.split_once(' ').expect("`METHOD /path`");
        let path = rest.split('`').next().unwrap().trim();
        let operation = &api["paths"][path][method.to_lowercase()];
        assert!(
            operation.is_object(),
            "{method} {path} is not in openapi.json"
        );
        let documented = |status: &str| &operation["responses"][status];
        // The success cell's backticks quote bodies, not codes.
        let success = statuses(&row[1]).into_keys().map(|s| (s, BTreeSet::new()));
        let answers = success.chain(statuses(&row[2]));
        for (status, codes) in answers {
            let response = documented(&status);
            assert!(
                response.is_object(),
                "{method} {path}: {status} is not documented"
            );
            let description = response["description"].as_str().unwrap_or_default();
            for code in codes {
                assert!(
                    description.contains(&format!("`{code}`")),
                    "{method} {path}: {status} does not name `{code}` ({description})"
                );
            }
        }
    }
    // And the codes table: every code is one the Error schema lists.
    let listed: BTreeSet<&str> = api["components"]["schemas"]["Error"]["properties"]["error"]
        ["enum"]
        .as_array()
        .expect("the Error schema's code enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for row in table_after(&readme, "| code | status | retry | meaning |") {
        for code in row[0].split('`').skip(1).step_by(2) {
            assert!(listed.contains(code), "`{code}` is not in the Error schema");
        }
    }
}

#[test]
fn the_api_pages_table_of_codes_is_the_servers_in_order_status_and_retry() {
    // The table the answers are written from, and what clients read `retryable` against:
    // both languages' pages must say exactly what it says.
    let served: Vec<(String, u16, bool)> = seckill::http::error::PROBLEMS
        .iter()
        .map(|p| (p.code.to_string(), p.status.as_u16(), p.retryable))
        .collect();
    for (page, heading, yes) in [
        ("docs/api.md", "| code | status | retry | meaning |", "yes"),
        (
            "docs/zh-CN/api.md",
            "| 错误码 | 状态码 | 重试 | 含义 |",
            "是",
        ),
    ] {
        let documented: Vec<(String, u16, bool)> = table_after(&doc(page), heading)
            .iter()
            .flat_map(|row| {
                let status: u16 = row[1].parse().expect("a status");
                let retry = row[2] == yes;
                row[0]
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(move |code| (code.to_string(), status, retry))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(documented, served, "{page}'s table of codes");
    }
}

#[tokio::test]
async fn every_metric_exported_is_documented_and_every_documented_one_exists() {
    let documented: BTreeSet<String> = table_after(&doc("docs/operations.md"), "### Metrics")
        .iter()
        .map(|row| row[0].trim_matches('`').to_string())
        .collect();
    let named: BTreeSet<String> = seckill::telemetry::metrics::ALL
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(
        documented, named,
        "docs/operations.md's metrics table and src/telemetry/metrics.rs disagree"
    );
    // What a live instance exports after a sale (and whatever the other tests in this
    // process recorded): every family is a documented one.
    let env = crate::helpers::TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = crate::helpers::create_product(&app.base_url, 1, "zk").await;
    let sold = crate::helpers::place_order(&crate::helpers::http(), &app.base_url, product, "m")
        .await
        .unwrap();
    assert_eq!(sold.status, reqwest::StatusCode::CREATED, "{sold:?}");
    let exported: BTreeSet<String> = crate::helpers::scrape(&app.base_url)
        .await
        .keys()
        .map(|series| {
            let name = series.split('{').next().unwrap();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|family| named.contains(*family))
                .unwrap_or(name)
                .to_string()
        })
        .collect();
    assert!(exported.len() >= 5, "scraped {exported:?}");
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "exported but not documented: {undocumented:?}"
    );
}

/// Each flag of `seckill --help`: its environment variable and default.
fn help_flags() -> BTreeMap<String, (String, String)> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .arg("--help")
        .env("COLUMNS", "200")
        .output()
        .expect("seckill --help");
    let help = String::from_utf8(out.stdout).unwrap();
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("--").or_else(|| {
            trimmed
                .strip_prefix("-")
                .and_then(|r| r.split_once(", --").map(|(_, f)| f))
        }) {
            let name = rest.split([' ', '=']).next().unwrap().to_string();
            if name != "help" && name != "version" {
                flags.insert(name.clone(), (String::new(), "none".to_string()));
                current = Some(name);
            } else {
                current = None;
            }
            continue;
        }
        let Some(flag) = &current else { continue };
        let entry = flags.get_mut(flag).unwrap();
        if let Some((_, env)) = trimmed.split_once("[env: ") {
            entry.0 = env.split(['=', ']']).next().unwrap().to_string();
        }
        if let Some((_, default)) = trimmed.split_once("[default: ") {
            entry.1 = format!("`{}`", default.split(']').next().unwrap());
        }
    }
    flags
}

#[test]
fn the_configuration_table_is_what_seckill_help_says() {
    let help = help_flags();
    assert!(help.len() >= 30, "parsed {} flags from --help", help.len());
    let table = doc("docs/configuration.md");
    let readme: BTreeMap<String, (String, String)> = table_after(&table, "# Configuration")
        .into_iter()
        .map(|row| {
            let flag = row[0]
                .trim_matches('`')
                .trim_start_matches("--")
                .to_string();
            (flag, (row[1].trim_matches('`').to_string(), row[2].clone()))
        })
        .collect();
    let only_help: Vec<_> = help.keys().filter(|f| !readme.contains_key(*f)).collect();
    let only_readme: Vec<_> = readme.keys().filter(|f| !help.contains_key(*f)).collect();
    assert!(
        only_help.is_empty() && only_readme.is_empty(),
        "flags missing from docs/configuration.md: {only_help:?}; flags there that --help does not know: {only_readme:?}"
    );
    for (flag, (env, default)) in &help {
        let (readme_env, readme_default) = &readme[flag];
        assert_eq!(readme_env, env, "the env of --{flag}");
        if default == "none" {
            // No default: the table says what that means (`off`, `(required)`, `none`).
            assert!(
                ["none", "off", "(required)"].contains(&readme_default.as_str()),
                "the table gives --{flag} a default ({readme_default}) that --help does not"
            );
        } else {
            assert_eq!(readme_default, default, "the default of --{flag}");
        }
    }
}

/// The fenced code blocks of a Markdown text, in order.
fn code_blocks(text: &str) -> Vec<String> {
    text.split("\n```")
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Every number written in the text outside code blocks: figures, defaults, counts.
fn numbers(text: &str) -> BTreeSet<String> {
    let prose: String = text.split("\n```").step_by(2).collect();
    let mut found = BTreeSet::new();
    let mut current = String::new();
    for c in prose.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || (!current.is_empty() && (c == '.' || c == ',')) {
            current.push(c);
        } else if !current.is_empty() {
            found.insert(current.trim_end_matches(['.', ',']).to_string());
            current.clear();
        }
    }
    found
}

/// Every page of the documentation beside the README, by its name in `docs/`.
fn pages() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs");
    let mut pages: Vec<String> = std::fs::read_dir(dir)
        .expect("docs/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .collect();
    pages.sort();
    pages
}

#[test]
fn each_chinese_page_keeps_its_english_pages_commands_figures_and_tables() {
    let mut pairs = vec![("README.md".to_string(), "README.zh-CN.md".to_string())];
    pairs.extend(
        pages()
            .into_iter()
            .map(|page| (format!("docs/{page}"), format!("docs/zh-CN/{page}"))),
    );
    assert!(pairs.len() >= 10, "{} pages", pairs.len());
    for (en_path, zh_path) in pairs {
        let (en, zh) = (doc(&en_path), doc(&zh_path));
        assert_eq!(
            code_blocks(&en),
            code_blocks(&zh),
            "{zh_path}: the commands differ"
        );
        let missing: Vec<_> = numbers(&en).difference(&numbers(&zh)).cloned().collect();
        assert!(
            missing.is_empty(),
            "figures of {en_path} missing in {zh_path}: {missing:?}"
        );
        let rows = |t: &str| t.lines().filter(|l| l.starts_with('|')).count();
        assert_eq!(rows(&en), rows(&zh), "{zh_path}: table rows");
    }
    let (en, zh) = (doc("README.md"), doc("README.zh-CN.md"));
    assert!(en.contains("[中文](README.zh-CN.md)") && zh.contains("[English](README.md)"));
}

/// A newcomer reads the README in five minutes: at most 150 lines, and every page of the
/// documentation one link away (the Chinese README links the Chinese pages).
#[test]
fn the_readme_is_short_and_links_every_page() {
    for (readme, prefix) in [("README.md", "docs/"), ("README.zh-CN.md", "docs/zh-CN/")] {
        let text = doc(readme);
        let lines = text.lines().count();
        assert!(lines <= 150, "{readme} has {lines} lines");
        for page in pages() {
            assert!(
                text.contains(&format!("]({prefix}{page})")),
                "{readme} does not link {prefix}{page}"
            );
        }
    }
}

/// Every relative link of the README and the documentation reaches a file, and every
/// `#anchor` a heading of it (as GitHub names headings).
#[test]
fn every_link_of_the_documentation_reaches_its_file_and_heading() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut documents = vec!["README.md".to_string(), "README.zh-CN.md".to_string()];
    for page in pages() {
        documents.push(format!("docs/{page}"));
        documents.push(format!("docs/zh-CN/{page}"));
    }
    let mut broken = Vec::new();
    for document in &documents {
        let text = doc(document);
        let prose: String = text.split("\n```").step_by(2).collect();
        let base = root.join(document);
        let dir = base.parent().unwrap();
        for link in prose.split("](").skip(1) {
            let Some(target) = link.split(')').next() else {
                continue;
            };
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                base.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!("{document}: {target} (no such file)"));
            } else if !anchor.is_empty() && !headings(&file).contains(anchor) {
                broken.push(format!("{document}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

/// The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped,
/// spaces as hyphens.
fn headings(file: &std::path::Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let prose: String = text.split("\n```").step_by(2).collect();
    prose
        .lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(|h| {
            h.trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}
