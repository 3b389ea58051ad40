//! A small SVG line chart (goodput against loss) without a plotting dependency.

use std::fmt::Write as _;

/// One series of (x, y) points.
pub struct Series<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// Renders a line chart with labelled axes; x values are plotted at equal spacing in the order
/// given (loss rates span decades), labelled with their values.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series<'_>]) -> String {
    let (w, h) = (720.0, 440.0);
    let (left, right, top, bottom) = (80.0, 30.0, 50.0, 70.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let xs: Vec<f64> = series
        .first()
        .map(|s| s.points.iter().map(|p| p.0).collect())
        .unwrap_or_default();
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let n = xs.len().max(2) as f64 - 1.0;
    let x_at = |i: usize| {
        left + if xs.len() <= 1 {
            pw / 2.0
        } else {
            pw * i as f64 / n
        }
    };
    let y_at = |y: f64| top + ph - ph * y / y_max;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="16">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    // Axes and grid.
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/>"##,
        top + ph,
        left + pw,
        top + ph
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#333"/>"##,
        top + ph
    );
    for k in 0..=5 {
        let y = y_max * k as f64 / 5.0;
        let py = y_at(y);
        let _ = write!(
            s,
            r##"<line x1="{left}" y1="{py}" x2="{}" y2="{py}" stroke="#ddd"/>"##,
            left + pw
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{:.1}</text>"#,
            left - 6.0,
            py + 4.0,
            y
        );
    }
    for (i, x) in xs.iter().enumerate() {
        let px = x_at(i);
        let _ = write!(
            s,
            r#"<text x="{px}" y="{}" text-anchor="middle">{}</text>"#,
            top + ph + 18.0,
            x
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 20.0,
        esc(x_label)
    );
    let _ = write!(
        s,
        r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">{}</text>"#,
        top + ph / 2.0,
        top + ph / 2.0,
        esc(y_label)
    );
    const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    for (k, ser) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        let pts: Vec<String> = ser
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{:.1},{:.1}", x_at(i), y_at(p.1)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        for (i, p) in ser.points.iter().enumerate() {
            let _ = write!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{c}"><title>{}: {} → {:.3}</title></circle>"#,
                x_at(i),
                y_at(p.1),
                esc(ser.name),
                p.0,
                p.1
            );
        }
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" fill="{c}">{}</text>"#,
            left + 10.0,
            top + 16.0 + 16.0 * k as f64,
            esc(ser.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
