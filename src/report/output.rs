//! The one place that chooses how a finished run is shown on stdout: the terminal table, YCSB's
//! text report, or the summary JSON (hyperfine's export manager plays this part there). Every
//! view reads the summary model; none recomputes a measurement.

use super::Summary;
use crate::plan::Format;
use std::io::IsTerminal;

/// The YCSB text report of each phase, by phase name, in phase order.
pub type YcsbTexts = [(String, String)];

/// Renders the final report in `format`.
pub fn render(format: Format, summary: &Summary, ycsb: &YcsbTexts) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => {
            let bold = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let mut t = super::table::render(&summary.phases, bold);
            if !summary.not_run.is_empty() {
                t.push_str(&format!(
                    "not run: {} (the run ended at {})\n",
                    summary.not_run.join(", "),
                    summary
                        .phases
                        .last()
                        .map_or("its start".to_string(), |p| format!(
                            "phase {}, {}",
                            p.name, p.outcome
                        ))
                ));
            }
            t
        }
        Format::Ycsb => {
            let mut out = String::new();
            for (name, t) in ycsb {
                out.push_str(&format!("# kvmeter phase {name}\n"));
                out.push_str(t);
            }
            out
        }
        Format::Json => serde_json::to_string_pretty(summary)? + "\n",
    })
}
