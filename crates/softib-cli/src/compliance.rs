//! `softib compliance`: traceability from the chapter 9 compliance statements to tests.
//!
//! A statement of the compliance table (`compliance.tsv`, one row per statement) binds one or
//! more services, listed in its `service` column joined with `+` (`RC+RD+XRC`, `UC`). Coverage
//! is counted per (statement, service) pair: the report has one row per pair, in table order
//! and, within a statement, in the order its services are listed.
//!
//! Tests are attributed to pairs by name:
//!
//! 1. A test belongs to the statement whose prefix its name starts with: the id in lower case
//!    with `-` and `.` turned into `_`, plus a trailing `_` (`C9-183` → `c9_183_`,
//!    `C9-158.2.1` → `c9_158_2_1_`). When several prefixes match, the longest wins, so
//!    `c9_158_2_1_x` belongs to C9-158.2.1, not C9-158.
//! 2. It covers, for that statement, every service the statement lists whose name (`rc`, `uc`,
//!    `ud`, `rd`, `xrc`, `raw`) is a whole `_`-separated segment of the rest of the test name:
//!    `c9_91_xrc_send_longer_than_receive_buffer` covers (C9-91, XRC). Segments are whole
//!    words, so `xrc` does not name RC, and a segment naming a service the statement does not
//!    list is just a word.
//! 3. A test that names none of the statement's services covers its first listed service:
//!    `c9_91_send_longer_than_receive_buffer_naks_invalid_request` covers (C9-91, RC) of the
//!    `RC+RD+XRC` statement C9-91.
//!
//! Every pair gets one of three statuses:
//!
//! * `covered` — at least one test covers it.
//! * `untestable` — the statement is obsolete or superseded in the spec (then every pair is),
//!   or `docs/compliance-untestable.tsv` gives a reason: a row keyed by the statement id
//!   (`o9-36`) applies to every pair of the statement, a row keyed `ID@SERVICE` (`o9-29@RC`,
//!   typically a TCA twin of an HCA rule that also binds RD or XRC) to that pair only.
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
    /// Print a JSON array of {"id", "status", "service", "tests", "reason"} objects, one per
    /// (statement, service) pair.
    #[arg(long)]
    json: bool,
    /// Only the (statement, service) pairs of this service.
    #[arg(long, value_enum)]
    service: Option<Service>,
    /// Only the (statement, service) pairs with this status.
    #[arg(long, value_enum)]
    status: Option<Status>,
    /// Show the crate and source file of each covering test.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
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

    /// The service called `name`, in any case (`RC`, `xrc`).
    fn parse(name: &str) -> Option<Service> {
        Service::value_variants()
            .iter()
            .copied()
            .find(|s| s.name().eq_ignore_ascii_case(name.trim()))
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
    /// The services it binds, as listed (never empty).
    services: Vec<Service>,
    requirement: String,
    notes: String,
}

/// One line of the report: a statement for one of its services.
#[derive(Debug)]
struct Row<'a> {
    statement: &'a Statement,
    service: Service,
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
    let report = build_report(&statements, SCANNED_TESTS, UNTESTABLE);
    for w in &report.warnings {
        eprintln!("softib compliance: warning: {w}");
    }
    let rows: Vec<&Row> = report
        .rows
        .iter()
        .filter(|r| args.service.is_none_or(|s| s == r.service))
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
        let services = parse_services(field(c_service))
            .map_err(|e| format!("line {line_no}: service of {id}: {e}"))?;
        statements.push(Statement {
            id: id.to_owned(),
            spec_status,
            services,
            requirement: field(c_req).to_owned(),
            notes: field(c_notes).to_owned(),
        });
    }
    Ok(statements)
}

/// The services of a `+`-separated service column (`RC+RD+XRC`), in order.
fn parse_services(column: &str) -> Result<Vec<Service>, String> {
    if column.trim().is_empty() {
        return Err("no service".into());
    }
    let mut services = Vec::new();
    for name in column.split('+') {
        let service = Service::parse(name).ok_or_else(|| {
            format!("`{name}` in `{column}` is not one of RC, UC, UD, RD, XRC and RAW")
        })?;
        if services.contains(&service) {
            return Err(format!("`{column}` lists {} twice", service.name()));
        }
        services.push(service);
    }
    Ok(services)
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

/// The services among `listed` (a statement's, never empty) that a test covers, given `rest`,
/// its name after the statement's prefix: those named by a whole `_`-separated segment of
/// `rest`, or else the first listed one.
fn covered_services(rest: &str, listed: &[Service]) -> Vec<Service> {
    let named: Vec<Service> = listed
        .iter()
        .copied()
        .filter(|s| {
            rest.split('_')
                .any(|seg| seg.eq_ignore_ascii_case(s.name()))
        })
        .collect();
    if named.is_empty() {
        listed[..1].to_vec()
    } else {
        named
    }
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
) -> Report<'a> {
    let prefixes: Vec<String> = statements.iter().map(|s| test_prefix(&s.id)).collect();
    // Covering tests by (statement index, service).
    let mut by_pair: HashMap<(usize, Service), Vec<&ScannedTest>> = HashMap::new();
    let mut warnings = Vec::new();
    for t in tests {
        let Some(i) = covered_statement(t.name, &prefixes) else {
            warnings.push(format!(
                "test {} ({}) names no statement of the compliance table",
                t.name, t.file
            ));
            continue;
        };
        let rest = &t.name[prefixes[i].len()..];
        for service in covered_services(rest, &statements[i].services) {
            by_pair.entry((i, service)).or_default().push(t);
        }
    }
    // Reasons of docs/compliance-untestable.tsv by (statement index, service), with no
    // service for a whole-statement row.
    let mut reasons: HashMap<(usize, Option<Service>), &str> = HashMap::new();
    for &(key, reason) in untestable {
        let (id, service) = match key.split_once('@') {
            Some((id, svc)) => (id, Some(svc)),
            None => (key, None),
        };
        let Some(i) = statements.iter().position(|s| s.id == id) else {
            warnings.push(format!(
                "docs/compliance-untestable.tsv lists {key}, which is not in the compliance table"
            ));
            continue;
        };
        let service = match service {
            None => None,
            Some(svc) => match Service::parse(svc).filter(|s| statements[i].services.contains(s)) {
                Some(s) => Some(s),
                None => {
                    warnings.push(format!(
                        "docs/compliance-untestable.tsv lists {key}, but {id} applies to {}, not {svc}",
                        services_column(&statements[i].services)
                    ));
                    continue;
                }
            },
        };
        reasons.insert((i, service), reason);
    }

    let mut rows = Vec::new();
    for (i, s) in statements.iter().enumerate() {
        let withdrawn = match s.spec_status {
            SpecStatus::Active => None,
            SpecStatus::Obsolete => Some("obsolete in the spec".to_owned()),
            SpecStatus::Superseded => Some(
                match superseded_by(&s.requirement).or_else(|| superseded_by(&s.notes)) {
                    Some(x) => format!("superseded by {x}"),
                    None => "superseded in the spec".to_owned(),
                },
            ),
        };
        for &service in &s.services {
            let tests = by_pair.remove(&(i, service)).unwrap_or_default();
            let listed = reasons
                .get(&(i, Some(service)))
                .or_else(|| reasons.get(&(i, None)));
            let (status, reason) = match (&withdrawn, listed) {
                (Some(w), _) => (Status::Untestable, Some(w.clone())),
                (None, listed) if !tests.is_empty() => {
                    if listed.is_some() {
                        warnings.push(format!(
                            "{} is untestable for {} according to docs/compliance-untestable.tsv, \
                             but has tests",
                            s.id,
                            service.name()
                        ));
                    }
                    (Status::Covered, None)
                }
                (None, Some(r)) => (Status::Untestable, Some((*r).to_owned())),
                (None, None) => (Status::Todo, None),
            };
            rows.push(Row {
                statement: s,
                service,
                status,
                tests,
                reason,
            });
        }
    }
    Report { rows, warnings }
}

/// `RC+RD+XRC`.
fn services_column(services: &[Service]) -> String {
    services
        .iter()
        .map(|s| s.name())
        .collect::<Vec<_>>()
        .join("+")
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
        .map(|r| r.service.name().len())
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
            r.service.name(),
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let statements: HashSet<&str> = rows.iter().map(|r| r.statement.id.as_str()).collect();
    let [covered, todo, untestable] = counts;
    writeln!(
        out,
        "{} (statement, service) pairs of {} statements: \
         {covered} covered, {todo} todo, {untestable} untestable",
        rows.len(),
        statements.len()
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
            obj.insert("service".into(), r.service.name().into());
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

    fn test(name: &'static str) -> ScannedTest {
        ScannedTest {
            name,
            file: "a.rs",
            crate_name: "a",
        }
    }

    /// (id, service, status, covering tests, reason) of a row.
    type RowSummary<'a> = (&'a str, Service, Status, Vec<&'a str>, Option<&'a str>);

    fn rows<'a>(report: &'a Report<'a>) -> Vec<RowSummary<'a>> {
        report
            .rows
            .iter()
            .map(|r| {
                (
                    r.statement.id.as_str(),
                    r.service,
                    r.status,
                    r.tests.iter().map(|t| t.name).collect(),
                    r.reason.as_deref(),
                )
            })
            .collect()
    }

    /// The pairs of a statement C9-91 binding `service_column` that a test called `name`
    /// covers, as the report finds them.
    fn attributed(service_column: &str, name: &'static str) -> Vec<Service> {
        let tsv = format!(
            "id\tstatus\tservice\trequirement\tnotes\nC9-91\tactive\t{service_column}\tr\t\n"
        );
        let statements = parse_tsv(&tsv).unwrap();
        let tests = [test(name)];
        let report = build_report(&statements, &tests, &[]);
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        report
            .rows
            .iter()
            .filter(|r| r.status == Status::Covered)
            .map(|r| r.service)
            .collect()
    }

    #[test]
    fn untagged_test_covers_the_first_listed_service() {
        use Service::*;
        let name = "c9_91_send_longer_than_receive_buffer_naks_invalid_request";
        assert_eq!(attributed("RC+RD+XRC", name), [Rc]);
        assert_eq!(attributed("XRC+RC", name), [Xrc]);
        assert_eq!(attributed("UC", name), [Uc]);
    }

    #[test]
    fn service_segment_selects_the_pair() {
        use Service::*;
        assert_eq!(attributed("RC+RD+XRC", "c9_91_xrc_send_longer"), [Xrc]);
        assert_eq!(attributed("RC+RD+XRC", "c9_91_send_over_rd"), [Rd]);
        assert_eq!(attributed("UC", "c9_91_uc_psn_checked"), [Uc]);
        // Several segments: every named service, in the statement's order.
        assert_eq!(attributed("RC+RD+XRC", "c9_91_xrc_and_rc_agree"), [Rc, Xrc]);
    }

    #[test]
    fn xrc_segment_does_not_name_rc() {
        use Service::*;
        assert_eq!(attributed("RC+XRC", "c9_91_xrc_only"), [Xrc]);
        assert_eq!(attributed("XRC+RC", "c9_91_xrc_only"), [Xrc]);
        // Nor does a segment that merely contains a service name.
        assert_eq!(attributed("RC+XRC", "c9_91_xrcd_shared"), [Rc]);
        assert_eq!(attributed("UC+UD", "c9_91_udp_port"), [Uc]);
    }

    #[test]
    fn segment_naming_an_unlisted_service_is_a_word() {
        use Service::*;
        // `ud` in an RC-only statement's test: falls back to the first listed service.
        assert_eq!(attributed("RC", "c9_91_ud_like_datagram"), [Rc]);
        assert_eq!(attributed("RC+RD+XRC", "c9_91_uc_twin_differs"), [Rc]);
        // Only the listed one of the named services counts.
        assert_eq!(attributed("UC+UD", "c9_91_ud_rejects_rc_sends"), [Ud]);
    }

    #[test]
    fn untestable_for_one_service() {
        use Service::*;
        let tsv = "id\tstatus\tservice\trequirement\tnotes\n\
            o9-6\tactive\tRC+RD\tTCA RC or CA RD\t\n";
        let statements = parse_tsv(tsv).unwrap();
        let statuses = |list: &[(&str, &str)]| {
            let r = build_report(&statements, &[], list);
            let got: Vec<(Service, Status, Option<String>)> = r
                .rows
                .iter()
                .map(|r| (r.service, r.status, r.reason.clone()))
                .collect();
            (got, r.warnings.len())
        };
        // `ID@SERVICE`: that pair only.
        assert_eq!(
            statuses(&[("o9-6@RC", "TCA-only for RC")]),
            (
                vec![
                    (Rc, Status::Untestable, Some("TCA-only for RC".into())),
                    (Rd, Status::Todo, None),
                ],
                0
            )
        );
        assert_eq!(
            statuses(&[("o9-6@rd", "no RD")]),
            (
                vec![
                    (Rc, Status::Todo, None),
                    (Rd, Status::Untestable, Some("no RD".into())),
                ],
                0
            )
        );
        // A whole-statement row: every pair, unless a pair has its own row.
        assert_eq!(
            statuses(&[("o9-6", "never"), ("o9-6@RD", "not RD")]),
            (
                vec![
                    (Rc, Status::Untestable, Some("never".into())),
                    (Rd, Status::Untestable, Some("not RD".into())),
                ],
                0
            )
        );
        // A service the statement does not list, or an unknown statement, is a warning.
        assert_eq!(
            statuses(&[("o9-6@UD", "x")]),
            (vec![(Rc, Status::Todo, None), (Rd, Status::Todo, None)], 1)
        );
        assert_eq!(statuses(&[("o9-7", "x")]).1, 1);
    }

    #[test]
    fn covered_pair_listed_as_untestable_is_a_warning() {
        let tsv = "id\tstatus\tservice\trequirement\tnotes\n\
            o9-6\tactive\tRC+RD\tr\t\n";
        let statements = parse_tsv(tsv).unwrap();
        let tests = [test("o9_6_rc_psn")];
        let warnings = |list: &[(&str, &str)]| build_report(&statements, &tests, list).warnings;
        assert!(warnings(&[("o9-6@RD", "x")]).is_empty());
        let w = warnings(&[("o9-6@RC", "x")]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("o9-6 is untestable for RC"), "{w:?}");
        assert_eq!(warnings(&[("o9-6", "x")]).len(), 1);
    }

    const TSV: &str = "id\tstatus\tservice\trequirement\tnotes\n\
        C9-1\tactive\tRC+XRC\tr1\t\n\
        C9-2\tactive\tUC\tr2\t\n\
        C9-3\tobsolete\tRC+RD\tWithdrawn.\t\n\
        C9-4\tsuperseded\tRD\tReplaced: superseded by C9-4.2.1 (see that row).\t\n\
        C9-4.2.1\tactive\tRD\tr4\t\n\
        o9-5\tactive\tRAW\tr5\t\n";

    #[test]
    fn report_has_one_row_per_pair() {
        use Service::*;
        let statements = parse_tsv(TSV).unwrap();
        let tests = [
            test("c9_1_first"),
            test("c9_3_rd_withdrawn"),
            test("c9_4_2_1_replacement"),
            test("c9_77_unknown"),
        ];
        let report = build_report(&statements, &tests, &[("o9-5", "hardware only")]);
        assert_eq!(
            rows(&report),
            [
                ("C9-1", Rc, Status::Covered, vec!["c9_1_first"], None),
                ("C9-1", Xrc, Status::Todo, vec![], None),
                ("C9-2", Uc, Status::Todo, vec![], None),
                (
                    "C9-3",
                    Rc,
                    Status::Untestable,
                    vec![],
                    Some("obsolete in the spec")
                ),
                (
                    "C9-3",
                    Rd,
                    Status::Untestable,
                    vec!["c9_3_rd_withdrawn"],
                    Some("obsolete in the spec")
                ),
                (
                    "C9-4",
                    Rd,
                    Status::Untestable,
                    vec![],
                    Some("superseded by C9-4.2.1")
                ),
                (
                    "C9-4.2.1",
                    Rd,
                    Status::Covered,
                    vec!["c9_4_2_1_replacement"],
                    None
                ),
                (
                    "o9-5",
                    Raw,
                    Status::Untestable,
                    vec![],
                    Some("hardware only")
                ),
            ]
        );
        assert_eq!(report.warnings.len(), 1);
        assert!(report.warnings[0].contains("c9_77_unknown"));

        let all: Vec<&Row> = report.rows.iter().collect();
        let text = render_text(&all, false);
        assert!(
            text.starts_with("C9-1      covered     RC   c9_1_first\n"),
            "{text}"
        );
        assert!(text.contains("\nC9-1      todo        XRC  -\n"), "{text}");
        assert!(
            text.ends_with(
                "8 (statement, service) pairs of 6 statements: 2 covered, 2 todo, 4 untestable\n"
            ),
            "{text}"
        );
        // Totals count the pairs shown, and the statements they belong to.
        let rc: Vec<&Row> = report.rows.iter().filter(|r| r.service == Rc).collect();
        assert!(render_text(&rc, false).ends_with(
            "2 (statement, service) pairs of 2 statements: 1 covered, 0 todo, 1 untestable\n"
        ));
        let first_two: Vec<&Row> = report.rows.iter().take(2).collect();
        assert!(render_text(&first_two, false).ends_with(
            "2 (statement, service) pairs of 1 statements: 1 covered, 1 todo, 0 untestable\n"
        ));

        let json: Value = serde_json::from_str(&render_json(&first_two, false)).unwrap();
        assert_eq!(json[1]["id"], "C9-1");
        assert_eq!(json[1]["service"], "XRC");
        assert_eq!(json[1]["status"], "todo");
    }

    #[test]
    fn service_column_is_parsed_in_order() {
        use Service::*;
        assert_eq!(parse_services("RC+RD+XRC").unwrap(), [Rc, Rd, Xrc]);
        assert_eq!(parse_services("XRC+RC").unwrap(), [Xrc, Rc]);
        assert_eq!(parse_services("raw").unwrap(), [Raw]);
        assert!(parse_services("RC+XR").unwrap_err().contains("`XR`"));
        assert!(parse_services("RC+RC").unwrap_err().contains("twice"));
        assert!(parse_services("").is_err());
        assert_eq!(Service::parse("xrc"), Some(Xrc));
        assert_eq!(Service::parse("RCX"), None);
    }

    #[test]
    fn malformed_tables_are_rejected() {
        assert!(parse_tsv("").is_err());
        assert!(parse_tsv("id\tstatus\tservice\n").is_err());
        let dup = "id\tstatus\tservice\trequirement\tnotes\nC9-1\tactive\tRC\tx\t\nC9-1\tactive\tRC\tx\t\n";
        assert!(parse_tsv(dup).unwrap_err().contains("twice"));
        let bad = "id\tstatus\tservice\trequirement\tnotes\nC9-1\tretired\tRC\tx\t\n";
        assert!(parse_tsv(bad).unwrap_err().contains("retired"));
        let svc = "id\tstatus\tservice\trequirement\tnotes\nC9-1\tactive\tRC+IB\tx\t\n";
        assert!(parse_tsv(svc)
            .unwrap_err()
            .contains("line 2: service of C9-1"));
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
