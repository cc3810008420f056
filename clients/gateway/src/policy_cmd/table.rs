//! A fixed-width text table: columns as wide as their widest cell, two spaces apart, numbers
//! right-aligned, no trailing blanks, ASCII rules only (so it reads the same in a terminal,
//! a CI log and a pasted review comment).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

pub(crate) struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(columns: Vec<(&'static str, Align)>) -> Table {
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    /// A row of cells, one per column (missing cells are blank, extra ones dropped).
    pub(crate) fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub(crate) fn render(&self) -> String {
        let width = |text: &str| text.chars().count();
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, (head, _))| {
                self.rows
                    .iter()
                    .filter_map(|row| row.get(i))
                    .map(|cell| width(cell))
                    .chain(std::iter::once(width(head)))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut out = String::new();
            for (((_, align), w), cell) in self.columns.iter().zip(&widths).zip(cells) {
                if !out.is_empty() {
                    out.push_str("  ");
                }
                let pad = " ".repeat(w.saturating_sub(width(cell)));
                match align {
                    Align::Left => {
                        out.push_str(cell);
                        out.push_str(&pad);
                    }
                    Align::Right => {
                        out.push_str(&pad);
                        out.push_str(cell);
                    }
                }
            }
            let mut out = out.trim_end().to_string();
            out.push('\n');
            out
        };
        let mut text = line(&mut self.columns.iter().map(|(head, _)| *head));
        let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        text.push_str(&line(&mut rules.iter().map(String::as_str)));
        for row in &self.rows {
            let blank = std::iter::repeat("");
            text.push_str(&line(&mut row.iter().map(String::as_str).chain(blank)));
        }
        text
    }
}
