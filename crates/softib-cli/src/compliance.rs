//! `softib compliance`: traceability from the chapter 9 compliance statements to tests.
//!
//! Every statement of the compliance table (`compliance.tsv`, one row per statement) gets one
//! of three statuses:
//!
//! * `covered` — at least one test's name starts with the statement's prefix: the id in lower
//!   case with `-` and `.` turned into `_`, plus a trailing `_` (`C9-183` → `c9_183_`,
//!   `C9-158.2.1` → `c9_158_2_1_`). When several prefixes match, the longest wins, so
//!   `c9_158_2_1_x` covers C9-158.2.1, not C9-158.
//! * `untestable` — the statement is obsolete or superseded in the spec, or it is listed with a
//!   reason in `docs/compliance-untestable.tsv`. A row whose id carries a service, `o9-29@RC`,
//!   says the statement cannot be tested *for that service* (typically a TCA twin of an HCA rule
//!   that also binds RD or XRC): the report filtered to that service (`--service rc`) shows it
//!   as untestable with that reason, and the unfiltered report does so only when every service
//!   the statement names has such a row.
//! * `todo` — anything else.
//!
//! The tests are found when softib is built (see `build.rs`), so the report describes the
//! tests of the tree the binary was built from.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::{Map, Value};

/// A statement test found by the build-time scan.
#[derive(Debug)]
struct ScannedTest {
    name: &'static str,
    /// Source file, relative to the repository root.
    file: &'static str,
    crate_name: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/compliance_scan.rs"));

/// The compliance table of the spec, beside the repository (`<repo>/../shared/spec/`).
const DEFAULT_TSV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/spec/compliance.tsv"
);

#[derive(Args, Debug)]
pub struct ComplianceArgs {
    /// Compliance statement table (TSV with a header row) [default: <repo>/../shared/spec/compliance.tsv]
    #[arg(long, value_name = "PATH")]
    tsv: Option<PathBuf>,
    /// Print a JSON array of {"id", "status", "service", "tests", "reason"} objects.
    #[arg(long)]
    json: bool,
    /// Only statements whose service list includes this service.
    #[arg(long, value_enum)]
    service: Option<Service>,
    /// Only statements with this status.
    #[arg(long, value_enum)]
    status: Option<Status>,
    /// Show the crate and source file of each covering test.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Service {
    Rc,
    Uc,
    Ud,
    Rd,
    Xrc,
    Raw,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Rc => "RC",
            Service::Uc => "UC",
            Service::Ud => "UD",
            Service::Rd => "RD",
            Service::Xrc => "XRC",
            Service::Raw => "RAW",
        }
    }

    /// True when the `+`-separated service column (e.g. `RC+RD+XRC`) names this service.
    fn listed_in(self, column: &str) -> bool {
        column
            .split('+')
            .any(|s| s.trim().eq_ignore_ascii_case(self.name()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Status {
    Covered,
    Todo,
    Untestable,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Covered => "covered",
            Status::Todo => "todo",
            Status::Untestable => "untestable",
        }
    }
}

/// Standing of a statement in the spec (`status` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SpecStatus {
    Active,
    Obsolete,
    Superseded,
}

#[derive(Debug)]
struct Statement {
    id: String,
    spec_status: SpecStatus,
    service: String,
    requirement: String,
    notes: String,
}

/// One line of the report.
#[derive(Debug)]
struct Row<'a> {
    statement: &'a Statement,
    status: Status,
    tests: Vec<&'a ScannedTest>,
    reason: Option<String>,
}

pub fn run(args: ComplianceArgs) -> ExitCode {
    let path = args
        .tsv
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TSV));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "softib compliance: cannot read the compliance table {}: {e} (use --tsv PATH)",
                path.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let statements = match parse_tsv(&text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("softib compliance: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let report = build_report(&statements, SCANNED_TESTS, UNTESTABLE, args.service);
    for w in &report.warnings {
        eprintln!("softib compliance: warning: {w}");
    }
    let rows: Vec<&Row> = report
        .rows
        .iter()
        .filter(|r| {
            args.service
                .is_none_or(|s| s.listed_in(&r.statement.service))
        })
        .filter(|r| args.status.is_none_or(|s| s == r.status))
        .collect();
    let out = if args.json {
        render_json(&rows, args.verbose) + "\n"
    } else {
        render_text(&rows, args.verbose)
    };
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        // A reader that stops early (`| head`) is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("softib compliance: cannot write the report: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Parses the compliance table: a header row naming at least the `id`, `status`, `service`,
/// `requirement` and `notes` columns, then one statement per non-empty line.
fn parse_tsv(text: &str) -> Result<Vec<Statement>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or("the table is empty")?;
    let columns: Vec<&str> = header.split('\t').map(str::trim).collect();
    let col = |name: &str| {
        columns
            .iter()
            .position(|c| *c == name)
            .ok_or_else(|| format!("the header has no `{name}` column"))
    };
    let (c_id, c_status, c_service, c_req, c_notes) = (
        col("id")?,
        col("status")?,
        col("service")?,
        col("requirement")?,
        col("notes")?,
    );
    let mut seen = HashSet::new();
    let mut statements = Vec::new();
    for (i, line) in lines {
        let line_no = i + 1;
        let fields: Vec<&str> = line.split('\t').collect();
        let field = |c: usize| fields.get(c).map_or("", |f| f.trim());
        let id = field(c_id);
        if id.is_empty() {
            return Err(format!("line {line_no}: no id"));
        }
        if !seen.insert(id.to_owned()) {
            return Err(format!("line {line_no}: statement {id} is listed twice"));
        }
        let spec_status = match field(c_status) {
            "active" => SpecStatus::Active,
            "obsolete" => SpecStatus::Obsolete,
            "superseded" => SpecStatus::Superseded,
            other => {
                return Err(format!(
                    "line {line_no}: status `{other}` of {id} is not active, obsolete or superseded"
                ))
            }
        };
        statements.push(Statement {
            id: id.to_owned(),
            spec_status,
            service: field(c_service).to_owned(),
            requirement: field(c_req).to_owned(),
            notes: field(c_notes).to_owned(),
        });
    }
    Ok(statements)
}

/// The test-name prefix of a statement id: `C9-158.2.1` → `c9_158_2_1_`.
fn test_prefix(id: &str) -> String {
    let mut prefix: String = id
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    prefix.push('_');
    prefix
}

/// Index of the statement a test name covers: the one with the longest matching prefix.
fn covered_statement(name: &str, prefixes: &[String]) -> Option<usize> {
    prefixes
        .iter()
        .enumerate()
        .filter(|(_, p)| name.starts_with(p.as_str()))
        .max_by_key(|(_, p)| p.len())
        .map(|(i, _)| i)
}

/// The statement that replaces a superseded one, as named by "superseded by X" in its text.
fn superseded_by(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("superseded by ")?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
        .unwrap_or(rest.len());
    let id = rest[..end].trim_end_matches('.');
    (!id.is_empty()).then_some(id)
}

struct Report<'a> {
    rows: Vec<Row<'a>>,
    warnings: Vec<String>,
}

fn build_report<'a>(
    statements: &'a [Statement],
    tests: &'a [ScannedTest],
    untestable: &[(&str, &str)],
    service: Option<Service>,
) -> Report<'a> {
    let prefixes: Vec<String> = statements.iter().map(|s| test_prefix(&s.id)).collect();
    let mut by_statement: HashMap<usize, Vec<&ScannedTest>> = HashMap::new();
    let mut warnings = Vec::new();
    for t in tests {
        match covered_statement(t.name, &prefixes) {
            Some(i) => by_statement.entry(i).or_default().push(t),
            None => warnings.push(format!(
                "test {} ({}) names no statement of the compliance table",
                t.name, t.file
            )),
        }
    }
    // Whole-statement reasons by id, and per-service ones by (id, SERVICE).
    let mut reasons: HashMap<&str, &str> = HashMap::new();
    let mut scoped: HashMap<(&str, String), &str> = HashMap::new();
    for &(key, reason) in untestable {
        let (id, svc) = match key.split_once('@') {
            Some((id, svc)) => (id, Some(svc)),
            None => (key, None),
        };
        let Some(st) = statements.iter().find(|s| s.id == id) else {
            warnings.push(format!(
                "docs/compliance-untestable.tsv lists {key}, which is not in the compliance table"
            ));
            continue;
        };
        match svc {
            None => {
                reasons.insert(id, reason);
            }
            Some(svc) if st.service.split('+').any(|x| x.eq_ignore_ascii_case(svc)) => {
                scoped.insert((id, svc.to_ascii_uppercase()), reason);
            }
            Some(svc) => warnings.push(format!(
                "docs/compliance-untestable.tsv lists {key}, but {id} applies to {}, not {svc}",
                st.service
            )),
        }
    }
    // The reason a statement with no test cannot be tested, as far as the report's service
    // filter goes: for that service, or (unfiltered) for every service it names.
    let scoped_reason = |s: &Statement| -> Option<String> {
        match service {
            Some(svc) => scoped
                .get(&(s.id.as_str(), svc.name().to_owned()))
                .map(|r| format!("for {}: {r}", svc.name())),
            None => {
                let per: Option<Vec<String>> = s
                    .service
                    .split('+')
                    .map(|x| {
                        let x = x.trim().to_ascii_uppercase();
                        scoped
                            .get(&(s.id.as_str(), x.clone()))
                            .map(|r| format!("for {x}: {r}"))
                    })
                    .collect();
                per.map(|p| p.join(" "))
            }
        }
    };

    let mut rows = Vec::with_capacity(statements.len());
    for (i, s) in statements.iter().enumerate() {
        let tests = by_statement.remove(&i).unwrap_or_default();
        let (status, reason) = match s.spec_status {
            SpecStatus::Obsolete => (Status::Untestable, Some("obsolete in the spec".to_owned())),
            SpecStatus::Superseded => {
                let by = superseded_by(&s.requirement).or_else(|| superseded_by(&s.notes));
                let reason = match by {
                    Some(x) => format!("superseded by {x}"),
                    None => "superseded in the spec".to_owned(),
                };
                (Status::Untestable, Some(reason))
            }
            SpecStatus::Active if !tests.is_empty() => {
                if reasons.contains_key(s.id.as_str()) {
                    warnings.push(format!(
                        "{} is listed in docs/compliance-untestable.tsv but has tests",
                        s.id
                    ));
                }
                (Status::Covered, None)
            }
            SpecStatus::Active => match reasons.get(s.id.as_str()) {
                Some(r) => (Status::Untestable, Some((*r).to_owned())),
                None => match scoped_reason(s) {
                    Some(r) => (Status::Untestable, Some(r)),
                    None => (Status::Todo, None),
                },
            },
        };
        rows.push(Row {
            statement: s,
            status,
            tests,
            reason,
        });
    }
    Report { rows, warnings }
}

fn describe_test(t: &ScannedTest, verbose: bool) -> String {
    if verbose {
        format!("{} ({}, {})", t.name, t.crate_name, t.file)
    } else {
        t.name.to_owned()
    }
}

fn render_text(rows: &[&Row], verbose: bool) -> String {
    let id_w = rows.iter().map(|r| r.statement.id.len()).max().unwrap_or(0);
    let svc_w = rows
        .iter()
        .map(|r| r.statement.service.len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let mut counts = [0usize; 3];
    for r in rows {
        counts[r.status as usize] += 1;
        let detail = match (&r.reason, r.status) {
            (Some(reason), _) => reason.clone(),
            (None, Status::Covered) => r
                .tests
                .iter()
                .map(|t| describe_test(t, verbose))
                .collect::<Vec<_>>()
                .join(", "),
            (None, _) => "-".to_owned(),
        };
        let line = format!(
            "{:<id_w$}  {:<10}  {:<svc_w$}  {detail}",
            r.statement.id,
            r.status.name(),
            r.statement.service,
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let [covered, todo, untestable] = counts;
    writeln!(
        out,
        "{} statements: {covered} covered, {todo} todo, {untestable} untestable",
        rows.len()
    )
    .expect("write to String");
    out
}

fn render_json(rows: &[&Row], verbose: bool) -> String {
    let items: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut obj = Map::new();
            obj.insert("id".into(), r.statement.id.clone().into());
            obj.insert("status".into(), r.status.name().into());
            obj.insert("service".into(), r.statement.service.clone().into());
            obj.insert(
                "tests".into(),
                r.tests.iter().map(|t| Value::from(t.name)).collect(),
            );
            if verbose {
                let locations = r
                    .tests
                    .iter()
                    .map(|t| {
                        let mut loc = Map::new();
                        loc.insert("test".into(), t.name.into());
                        loc.insert("crate".into(), t.crate_name.into());
                        loc.insert("file".into(), t.file.into());
                        Value::Object(loc)
                    })
                    .collect();
                obj.insert("locations".into(), Value::Array(locations));
            }
            if let Some(reason) = &r.reason {
                obj.insert("reason".into(), reason.clone().into());
            }
            Value::Object(obj)
        })
        .collect();
    serde_json::to_string_pretty(&Value::Array(items)).expect("JSON values always serialize")
}

/// The build script, compiled here so its test-function scanner can be unit-tested.
#[cfg(test)]
#[path = "../build.rs"]
#[allow(dead_code)]
mod build_script;

#[cfg(test)]
mod tests {
    use super::build_script::scan::test_fns;
    use super::*;

    #[test]
    fn prefix_of_ids() {
        assert_eq!(test_prefix("C9-183"), "c9_183_");
        assert_eq!(test_prefix("o9-29"), "o9_29_");
        assert_eq!(test_prefix("C9-158.2.1"), "c9_158_2_1_");
        assert_eq!(test_prefix("o9-36.a1"), "o9_36_a1_");
    }

    #[test]
    fn longest_prefix_wins() {
        let prefixes: Vec<String> = ["C9-158", "C9-158.2.1", "C9-15", "o9-29"]
            .iter()
            .map(|id| test_prefix(id))
            .collect();
        assert_eq!(covered_statement("c9_158_2_1_emits_x", &prefixes), Some(1));
        assert_eq!(covered_statement("c9_158_2_other", &prefixes), Some(0));
        assert_eq!(covered_statement("c9_15_short", &prefixes), Some(2));
        assert_eq!(covered_statement("c9_1583_none", &prefixes), None);
        assert_eq!(covered_statement("o9_29_psn", &prefixes), Some(3));
        assert_eq!(covered_statement("o9_2_none", &prefixes), None);
        assert_eq!(covered_statement("c9_158", &prefixes), None);
    }

    #[test]
    fn superseding_statement_is_read_from_the_text() {
        let text = "Replaced: the seed says this statement is obsolete and superseded by \
                    C9-150.2.1 (see that row).";
        assert_eq!(superseded_by(text), Some("C9-150.2.1"));
        assert_eq!(superseded_by("superseded by o9-95.2.1."), Some("o9-95.2.1"));
        assert_eq!(superseded_by("obsolete and deleted"), None);
    }

    #[test]
    fn scanner_counts_only_test_functions() {
        let src = r###"
            #[test]
            fn c9_1_x() {}

            fn c9_1_helper() {}

            // #[test] fn c9_1_in_line_comment() {}
            /* #[test] fn c9_1_in_block /* nested */ fn c9_1_still_comment() {} */
            /// #[test] fn c9_1_in_doc_comment() {}
            #[test]
            fn plain_test() {
                let s = "#[test] fn c9_1_in_string() {}";
                let r = r##"#[test] fn c9_1_in_raw "# string() {}"##;
                let q = '"';
                let b = b'\'';
            }

            #[test]
            #[should_panic(expected = "boom")]
            pub(crate) fn c9_2_after_other_attribute() {}

            #[tokio::test]
            async fn o9_3_async() {}

            #[cfg(test)]
            fn c9_4_cfg_test_helper() {}

            #[test]
            #[ignore]
            fn c9_5_ignored() {}

            #[test]
            fn c9_6_outer<'a>() { fn c9_6_nested_helper() {} }
        "###;
        assert_eq!(
            test_fns(src),
            [
                "c9_1_x",
                "plain_test",
                "c9_2_after_other_attribute",
                "o9_3_async",
                "c9_6_outer"
            ]
        );
    }

    #[test]
    fn scanner_counts_proptest_functions() {
        let src = r#"
            proptest! {
                #![proptest_config(ProptestConfig::with_cases(64))]
                #[test]
                fn c9_7_with_attribute(x in 0u8..4) { prop_assert!(x < 4); }

                fn c9_8_without_attribute(x in any::<u32>()) {
                    fn c9_8_nested_helper() {}
                }
            }
            prop_compose! {
                fn c9_9_strategy()(x in 0u8..4) -> u8 { x }
            }
        "#;
        assert_eq!(
            test_fns(src),
            ["c9_7_with_attribute", "c9_8_without_attribute"]
        );
    }

    const TSV: &str = "id\tstatus\tservice\trequirement\tnotes\n\
        C9-1\tactive\tRC+XRC\tr1\t\n\
        C9-2\tactive\tUC\tr2\t\n\
        C9-3\tobsolete\tRC\tWithdrawn.\t\n\
        C9-4\tsuperseded\tRD\tReplaced: superseded by C9-4.2.1 (see that row).\t\n\
        C9-4.2.1\tactive\tRD\tr4\t\n\
        o9-5\tactive\tRAW\tr5\t\n";

    #[test]
    fn untestable_for_one_service() {
        let tsv = "id\tstatus\tservice\trequirement\tnotes\n\
            o9-6\tactive\tRC+RD\tTCA RC or CA RD\t\n";
        let statements = parse_tsv(tsv).unwrap();
        let one = [("o9-6@RC", "TCA-only for RC")];
        let status = |list: &[(&str, &str)], svc| {
            let r = build_report(&statements, &[], list, svc);
            (r.rows[0].status, r.rows[0].reason.clone(), r.warnings.len())
        };
        // For RC it cannot be tested; for RD, and overall, it is still to do.
        assert_eq!(
            status(&one, Some(Service::Rc)),
            (
                Status::Untestable,
                Some("for RC: TCA-only for RC".into()),
                0
            )
        );
        assert_eq!(status(&one, Some(Service::Rd)), (Status::Todo, None, 0));
        assert_eq!(status(&one, None), (Status::Todo, None, 0));
        // With a row for every service it names, it is untestable overall too.
        let both = [("o9-6@RC", "a"), ("o9-6@RD", "b")];
        assert_eq!(
            status(&both, None),
            (Status::Untestable, Some("for RC: a for RD: b".into()), 0)
        );
        // A service the statement does not name is a warning.
        assert_eq!(status(&[("o9-6@UD", "x")], None).2, 1);
    }

    #[test]
    fn report_statuses() {
        let statements = parse_tsv(TSV).unwrap();
        let tests = [
            ScannedTest {
                name: "c9_1_first",
                file: "a.rs",
                crate_name: "a",
            },
            ScannedTest {
                name: "c9_4_2_1_replacement",
                file: "a.rs",
                crate_name: "a",
            },
            ScannedTest {
                name: "c9_77_unknown",
                file: "b.rs",
                crate_name: "b",
            },
        ];
        let report = build_report(&statements, &tests, &[("o9-5", "hardware only")], None);
        let got: Vec<(&str, Status, Vec<&str>, Option<&str>)> = report
            .rows
            .iter()
            .map(|r| {
                (
                    r.statement.id.as_str(),
                    r.status,
                    r.tests.iter().map(|t| t.name).collect(),
                    r.reason.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("C9-1", Status::Covered, vec!["c9_1_first"], None),
                ("C9-2", Status::Todo, vec![], None),
                (
                    "C9-3",
                    Status::Untestable,
                    vec![],
                    Some("obsolete in the spec")
                ),
                (
                    "C9-4",
                    Status::Untestable,
                    vec![],
                    Some("superseded by C9-4.2.1")
                ),
                (
                    "C9-4.2.1",
                    Status::Covered,
                    vec!["c9_4_2_1_replacement"],
                    None
                ),
                ("o9-5", Status::Untestable, vec![], Some("hardware only")),
            ]
        );
        assert_eq!(report.warnings.len(), 1);
        assert!(report.warnings[0].contains("c9_77_unknown"));

        let rows: Vec<&Row> = report.rows.iter().collect();
        let text = render_text(&rows, false);
        assert!(text.ends_with("6 statements: 2 covered, 1 todo, 3 untestable\n"));
    }

    #[test]
    fn service_filter_matches_whole_names() {
        assert!(Service::Rc.listed_in("RC+RD+XRC"));
        assert!(Service::Xrc.listed_in("RC+XRC"));
        assert!(!Service::Rc.listed_in("XRC"));
        assert!(!Service::Ud.listed_in("UC"));
        assert!(Service::Raw.listed_in("RAW"));
    }

    #[test]
    fn malformed_tables_are_rejected() {
        assert!(parse_tsv("").is_err());
        assert!(parse_tsv("id\tstatus\tservice\n").is_err());
        let dup = "id\tstatus\tservice\trequirement\tnotes\nC9-1\tactive\tRC\tx\t\nC9-1\tactive\tRC\tx\t\n";
        assert!(parse_tsv(dup).unwrap_err().contains("twice"));
        let bad = "id\tstatus\tservice\trequirement\tnotes\nC9-1\tretired\tRC\tx\t\n";
        assert!(parse_tsv(bad).unwrap_err().contains("retired"));
    }

    #[test]
    fn untestable_list_is_embedded() {
        assert!(!UNTESTABLE.is_empty());
        for (id, reason) in UNTESTABLE {
            assert!(id.starts_with("C9-") || id.starts_with("o9-"), "{id}");
            assert!(!reason.is_empty());
        }
    }
}
