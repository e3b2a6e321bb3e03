//! Each line's colour and dash pattern: eight colours are too few for an experiment figure's
//! lines (papers/003 Fig. 6 has 12), so the pair, not the colour alone, tells series apart, and
//! no two series of a figure share both (issue 40 item 7).

use super::Series;

pub(super) const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Line patterns (`stroke-dasharray`; "" is solid). A series asked `dashed` (from intended
/// start) starts at the second; more series than colours move on to the next pattern.
const DASHES: [&str; 6] = ["", "5 3", "1 3", "8 3 2 3", "12 4", "3 3 1 3 1 3"];

/// Each series' (colour, dash pattern): no two series share both (issue 40 item 7: 12 lines in
/// 8 colours repeated 4). Series i takes colour i mod 8 and pattern i div 8 (a dashed series
/// one further), moving to the next pattern, then the next colour, while the pair is taken.
pub(super) fn styles(series: &[Series]) -> Vec<(&'static str, &'static str)> {
    let mut used: Vec<(usize, usize)> = vec![];
    let (nc, nd) = (PALETTE.len(), DASHES.len());
    for (i, s) in series.iter().enumerate() {
        let (c0, d0) = (i % nc, i / nc + usize::from(s.dashed));
        let pick = (0..nc * nd)
            .map(|k| ((c0 + k / nd) % nc, (d0 + k) % nd))
            .find(|p| !used.contains(p))
            .unwrap_or((c0, d0 % nd));
        used.push(pick);
    }
    used.into_iter()
        .map(|(c, d)| (PALETTE[c], DASHES[d]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{LineChart, Series};
    use std::collections::BTreeSet;

    /// A figure with 20 series, some asked dashed: the SVG's lines (their `stroke` and
    /// `stroke-dasharray`, read back from the drawing) and legend entries have 20 distinct
    /// (colour, dash) pairs.
    #[test]
    fn no_two_series_share_colour_and_dash() {
        let mut c = LineChart::new("many", "many", "x", "y");
        for i in 0..20 {
            let mut s = Series::new(
                &format!("s{i}"),
                vec![(0.0, i as f64), (1.0, i as f64 + 1.0)],
            );
            s.dashed = i % 5 == 4;
            c.series.push(s);
        }
        let svg = c.svg();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let style = |n: roxmltree::Node| {
            (
                n.attribute("stroke").unwrap_or("").to_string(),
                n.attribute("stroke-dasharray").unwrap_or("").to_string(),
            )
        };
        let lines: Vec<(String, String)> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .map(|g| {
                let p = g
                    .children()
                    .find(|n| n.has_tag_name("polyline"))
                    .expect("a line");
                style(p)
            })
            .collect();
        assert_eq!(lines.len(), 20);
        let distinct: BTreeSet<_> = lines.iter().collect();
        assert_eq!(distinct.len(), 20, "{lines:?}");
        // The legend draws each series as its line does.
        let legend: Vec<(String, String)> = doc
            .descendants()
            .filter(|n| n.has_tag_name("line") && n.attribute("class") == Some("legend-line"))
            .map(style)
            .collect();
        assert_eq!(legend, lines);
        // A series asked dashed is drawn dashed.
        for (i, (_, dash)) in lines.iter().enumerate() {
            if i % 5 == 4 {
                assert!(!dash.is_empty(), "series {i} should be dashed");
            }
        }
    }
}
