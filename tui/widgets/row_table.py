"""A ``DataTable`` of one-line rows of plain cells that draws a row again only when what it shows changed,
and draws it from segments instead of through Rich (the node overview's table: 64 rows, 14 columns,
a few cells of every row changing twice a second)."""

from __future__ import annotations

from typing import NamedTuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._segment_tools import line_crop
from textual.geometry import Offset, Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, CellKey, ColumnKey, RowKey


class _Drawing(NamedTuple):
    base_style: Style
    scroll: Offset
    fixed_height: int
    header_height: int
    width: int
    cursor_row: int | None
    hover_row: int | None
    look: tuple
    widths: tuple[int, ...]


class RowTable(DataTable):
    """A ``DataTable`` whose body rows are one line of plain ``Text`` cells (one style each).

    ``DataTable`` drops every rendered cell whenever any cell changes (its caches are keyed by an update
    counter), and draws each cell through Rich's ``Padding`` and ``Styled`` (~0.1 ms a cell here), so
    each 2 Hz update of a few figures, and every time the overview is shown again (focus restyles the
    table), drew all visible cells of all rows: 60 rows x 14 cells, 50-120 ms a frame that keys waited
    behind. Here a row's line is kept until a cell of that row is written (or its place, the widths, the
    highlight, focus or theme change), each cell by its text and style, and a cell or row not kept is
    built from segments with the styles DataTable would give it (a test compares both renderings). The
    header, and any table that is not one plain line per row, is drawn by DataTable itself.
    """

    KEPT_CELLS = 8_000
    """Rendered cells kept (64 rows x 14 columns, a few highlight states each); past it they start over."""
    KEPT_LINES = 1_000
    """Rendered lines kept, likewise (one per row and highlight state)."""
    PLAIN = True
    """Build rows from segments (``False``: DataTable's own rendering, which tests compare against)."""

    def __init__(self, **kwargs) -> None:
        self._kept_cells: dict[tuple, list[Segment]] = {}  # before DataTable's init, which clears caches
        self._kept_lines: dict[tuple, Strip] = {}
        self._looks: dict[tuple, tuple[Style, Style, Style]] = {}
        self._cell_styles: dict[tuple, tuple[Style, Style]] = {}
        self._end_styles: dict[tuple, Style] = {}
        self._versions: dict[object, int] = {}
        """Each row's version: a new one whenever a cell of it is written (its kept line's key)."""
        self._version = 0
        self._widths_before: list[int] | None = None
        self._drawing: _Drawing | None = None
        super().__init__(**kwargs)

    def render_lines(self, crop: Region) -> list[Strip]:
        self._drawing = self._drawing_state()  # DataTable looks these up again for every line
        try:
            return super().render_lines(crop)
        finally:
            self._drawing = None

    def _drawing_state(self) -> _Drawing:
        """What every line of one drawing shares: the table's style (~0.1 ms to look up), its scroll, the
        cursor's and hover's rows, the look and the columns' widths (a dozen reactive reads each)."""
        base_style = self.rich_style
        pad = self.cell_padding
        fixed = (self._row_locations.get_key(index) for index in range(self.fixed_rows))
        fixed_height = sum(self.get_row_height(key) for key in fixed if key is not None)
        if self.show_header:
            fixed_height += self.get_row_height(self._header_row_key)
        return _Drawing(
            base_style=base_style,
            scroll=self.scroll_offset,
            fixed_height=fixed_height,
            header_height=self.header_height if self.show_header else 0,
            width=self.size.width,
            cursor_row=self.cursor_coordinate.row if self.show_cursor else None,
            hover_row=self.hover_coordinate.row if self.show_cursor and self._show_hover_cursor else None,
            look=(base_style, self.cursor_type, self.zebra_stripes, pad, self._pseudo_class_state,
                  self.app.theme, self.cursor_foreground_priority, self.cursor_background_priority),
            widths=tuple((c.content_width if c.auto_width else c.width) + 2 * pad for c in self.ordered_columns),
        )

    def render_line(self, y: int) -> Strip:
        """DataTable's ``render_line``, with what the lines of a drawing share looked up once."""
        drawing = self._drawing or self._drawing_state()
        scroll_x, scroll_y = drawing.scroll
        if y >= drawing.fixed_height:
            y += scroll_y
        return self._table_line(y, scroll_x, scroll_x + drawing.width, drawing)

    def _table_line(self, y: int, x1: int, x2: int, drawing: _Drawing) -> Strip:
        """A table line, kept by what its row shows (DataTable keeps lines only until any cell changes)."""
        base_style = drawing.base_style
        if y < drawing.header_height:
            return super()._render_line(y, x1, x2, base_style)
        try:
            row_key, line_no = self._get_offsets(y)
        except LookupError:
            return super()._render_line(y, x1, x2, base_style)
        row_index = self._row_locations.get(row_key)
        if row_index is None:
            return super()._render_line(y, x1, x2, base_style)
        look = drawing.look
        # Kept by the styles the row is drawn with, not by what they come from: the focus coming back
        # changes only the cursor's row (the table has no focus tint), not all 60 rows.
        styles = self._look(row_index % 2, drawing.cursor_row == row_index, drawing.hover_row == row_index, look)
        key = (self._versions.get(row_key), row_index, line_no, drawing.widths, x1, x2, drawing.width, base_style,
               styles, look[1:4])
        strip = self._kept_lines.get(key)
        if strip is None:
            cells = tuple(self._data[row_key].values())
            strip = self._plain_line(row_index, line_no, cells, drawing.widths, x1, x2, drawing.width, base_style,
                                     styles)
            if strip is None:  # drawn by DataTable: kept by everything that draws it
                key += (look,)
                strip = self._kept_lines.get(key) or super()._render_line(y, x1, x2, base_style)
            if len(self._kept_lines) >= self.KEPT_LINES:
                self._kept_lines.clear()
            self._kept_lines[key] = strip
        return strip

    def _plain_line(self, row_index: int, line_no: int, cells: tuple, widths: tuple[int, ...], x1: int, x2: int,
                    table_width: int, base_style: Style, styles: tuple[Style, Style, Style]) -> Strip | None:
        """The row's line as DataTable's ``_render_line_in_row`` draws it (zebra row style, each cell padded,
        the cursor's and hover's styles on top, the row's style extended to the table's width); ``None``
        where that takes what only DataTable draws (fixed rows or columns, row labels, taller rows, a
        cell with spans or that does not fit)."""
        if (not self.PLAIN or line_no or self.fixed_rows or self.fixed_columns or self._should_render_row_labels
                or self.cursor_type != "row" or len(cells) != len(widths)):
            return None
        under, post, extend_style = styles
        segments: list[Segment] = []
        for column_index, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            key = (row_index, column_index, cell.plain, str(cell.style), width, under, post)
            line = self._kept_cells.get(key)
            if line is None:
                if len(self._kept_cells) >= self.KEPT_CELLS:
                    self._kept_cells.clear()
                line = self._plain_cell(cell, row_index, column_index, width, under, post)
                if line is None:
                    return None
                self._kept_cells[key] = line
            segments.extend(line)
        used = sum(widths)
        remaining = max(0, table_width - used)
        end_key = (extend_style, row_index)
        end_style = self._end_styles.get(end_key)
        if end_style is None:
            if len(self._end_styles) >= self.KEPT_LINES:
                self._end_styles.clear()
            end_style = self._end_styles[end_key] = extend_style + Style.from_meta(
                {"row": row_index, "column": 0, "out_of_bounds": True})
        segments.append(Segment(" " * remaining, end_style))
        if x1 == 0 and used + remaining == table_width <= x2:  # the whole row, as wide as the table: nothing to cut
            return Strip(segments, table_width)
        return Strip(line_crop(segments, x1, x2, table_width)).adjust_cell_length(table_width, base_style)

    def _look(self, odd: int, cursor: bool, hover: bool, look: tuple) -> tuple[Style, Style, Style]:
        """(the row's style, what goes over a cell's text and padding, the style past the last column):
        component styles looked up once per kind of row, not once per row."""
        key = (odd, cursor, hover, look)
        found = self._looks.get(key)
        if found is None:
            base_style = look[0]
            if self.zebra_stripes:
                row_style = self.get_component_styles("datatable--odd-row" if odd else "datatable--even-row").rich_style
            else:
                row_style = base_style
            component, post = self._get_styles_to_render_cell(
                False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
                self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
            extend, _ = self._get_styles_to_render_cell(
                False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor, False, False)
            found = self._looks[key] = (row_style + component, post, row_style + extend)
        return found

    def _plain_cell(self, cell: Text, row_index: int, column_index: int, width: int, under: Style,
                    post: Style) -> list[Segment] | None:
        """One cell: padding, its text in its one style, padding; the row's and cursor's styles under it
        and the cursor's colours over it, as ``Styled(Padding(cell))`` gives them."""
        pad = self.cell_padding
        text = cell.plain
        room = width - 2 * pad
        if cell.spans or "\n" in text or room < 0 or cell_len(text) != len(text):
            return None
        text = text[:room]  # a column not widened yet (DataTable measures on idle) crops, as Rich does
        key = (under, post, row_index, column_index, str(cell.style))
        styles = self._cell_styles.get(key)
        if styles is None:  # the same for every text the cell shows: kept while the look lasts
            around = under + Style.from_meta({"row": row_index, "column": column_index})
            styles = self._cell_styles[key] = (around + post, around + self.app.console.get_style(cell.style) + post)
        blank, styled = styles
        if styled == blank:  # one segment, not three: Textual filters and cuts every segment of every frame
            return [Segment(f"{' ' * pad}{text}{' ' * (room - len(text) + pad)}", blank)]
        line = [Segment(" " * pad, blank)] if pad else []
        if text:
            line.append(Segment(text, styled))
        if room - len(text) + pad:
            line.append(Segment(" " * (room - len(text) + pad), blank))
        return line

    def _set_hover_cursor(self, active: bool) -> None:
        """DataTable repaints the hover row at every key (``enter`` too, a frame before the one the key
        causes, which then waited for the next frame tick): only when the hover cursor comes or goes."""
        if active != self._show_hover_cursor:
            super()._set_hover_cursor(active)

    def add_row(self, *cells, **kwargs) -> RowKey:
        row_key = super().add_row(*cells, **kwargs)
        self._versions[row_key] = self._version = self._version + 1
        return row_key

    def update_cell(self, row_key, column_key, value, *, update_width: bool = False) -> None:
        super().update_cell(row_key, column_key, value, update_width=update_width)
        self._versions[RowKey(row_key) if isinstance(row_key, str) else row_key] = self._version = self._version + 1

    def update_rows(self, changes: dict[str, dict[str, object]], widen: set[tuple[str, str]]) -> None:
        """Write many cells at once (row key -> column key -> value), as ``update_cell`` would each, with
        one repaint for all (every ``update_cell`` repaints: 64 rows of a few cells took ~10 ms). The
        cells in ``widen`` (row key, column key) are measured again (a text wider than its column)."""
        for row, cells in changes.items():
            row_key = RowKey(row)
            if row_key not in self._row_locations:
                raise CellDoesNotExist(f"No row with key {row!r}.")
            data = self._data[row_key]
            for column, value in cells.items():
                data[ColumnKey(column)] = value
            self._versions[row_key] = self._version = self._version + 1
        for row, column in widen:
            self._updated_cells.add(CellKey(RowKey(row), ColumnKey(column)))
        if changes:
            self._update_count += 1
            self._require_update_dimensions = self._require_update_dimensions or bool(widen)
            self.refresh()

    def _update_column_widths(self, updated_cells) -> None:
        if self._widths_before is None:
            self._widths_before = self._content_widths()
        super()._update_column_widths(updated_cells)

    def _update_dimensions(self, new_rows) -> None:
        """Measuring cells (when idle) may widen columns after a frame drew the header: DataTable keeps
        drawn lines by an update counter that this leaves alone, so the header kept its old widths."""
        before = self._widths_before or self._content_widths()
        self._widths_before = None
        super()._update_dimensions(new_rows)
        if self._content_widths() != before:
            self._line_cache.clear()
            self._row_render_cache.clear()
            self._cell_render_cache.clear()
            self.refresh()

    def _content_widths(self) -> list[int]:
        return [column.content_width for column in self.ordered_columns]

    def notify_style_update(self) -> None:
        self._looks.clear()
        self._end_styles.clear()
        if len(self._cell_styles) >= self.KEPT_CELLS:
            self._cell_styles.clear()
        super().notify_style_update()

    def _clear_caches(self) -> None:
        self._kept_cells.clear()
        self._kept_lines.clear()
        self._looks.clear()
        self._cell_styles.clear()
        self._end_styles.clear()
        super()._clear_caches()
