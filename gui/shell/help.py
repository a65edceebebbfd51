"""Help > User guide / Teacher's guide: the guides (``resources/docs/*.md``, carried by the
packaged app) in a window of their own, offline. Qt's Markdown reader renders them; a link to
another guide opens it in the same window (Back and Forward go through them), a link to one of
its headings (``cli.md#tree-and-score``, GitHub's spelling) scrolls there, a link to the web
opens the browser. The text follows the window's size (the presentation view's too), and the
pictures are scaled down to the window's width.

``HelpWindow`` is given a parent widget and the window's text size as a callable, never the
window; ``Guides`` builds it on first use."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QUrl
from PySide6.QtGui import (
    QDesktopServices,
    QImageReader,
    QKeySequence,
    QResizeEvent,
    QShortcut,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QLabel, QTextBrowser, QToolBar, QVBoxLayout, QWidget

from engine.models.catalog import RESOURCES

GUIDES_DIR = RESOURCES / "docs"
# The guides the Help menu names (the rest are one link away, from the contents page).
GUIDES = {
    "contents": "index.md",
    "user": "user-guide.md",
    "teacher": "teachers-guide.md",
}
WEB = ("http", "https", "mailto")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub spells it: lower case, every character but letters, digits,
    ``_``, ``-`` and spaces dropped, spaces turned into hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(headings: list[str]) -> list[str]:
    """Each heading's anchor in order; a repeated one gets ``-1``, ``-2``... as on GitHub."""
    seen: dict[str, int] = {}
    out = []
    for heading in headings:
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append(base if n == 0 else f"{base}-{n}")
    return out


class GuideBrowser(QTextBrowser):
    """A QTextBrowser that finds a Markdown heading by its GitHub anchor (Qt gives headings
    none) and fits the pictures to its width."""

    def doSetSource(  # noqa: N802 - Qt override
        self,
        name: QUrl,
        kind: QTextDocument.ResourceType = QTextDocument.ResourceType.UnknownResource,
    ) -> None:
        super().doSetSource(name, kind)
        self.fit_images()
        if name.hasFragment():
            self.scroll_to_heading(name.fragment())

    def headings(self) -> list[tuple[str, int]]:
        """(anchor, position) of every heading of the page shown."""
        blocks, block = [], self.document().begin()
        while block.isValid():
            if block.blockFormat().headingLevel() > 0:
                blocks.append(block)
            block = block.next()
        names = anchors([b.text() for b in blocks])
        return [(name, b.position()) for name, b in zip(names, blocks, strict=True)]

    def scroll_to_heading(self, anchor: str) -> bool:
        """Put the heading with this anchor at the top; False when the page has none."""
        for name, position in self.headings():
            if name == anchor:
                block = self.document().findBlock(position)
                top = self.document().documentLayout().blockBoundingRect(block).top()
                self.verticalScrollBar().setValue(int(top))
                return True
        return False

    def fit_images(self) -> None:
        """Every picture as wide as it is, or as the page when it is wider."""
        doc, room = self.document(), max(200, self.viewport().width() - 30)
        found = []
        block = doc.begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                if fragment.charFormat().isImageFormat():
                    found.append((fragment.position(), fragment.length(),
                                  fragment.charFormat().toImageFormat()))  # fmt: skip
                it += 1
            block = block.next()
        for position, length, image in found:
            path = self.source().resolved(QUrl(image.name())).toLocalFile()
            size = QImageReader(path).size()
            if size.width() <= 0:
                continue
            width = min(size.width(), room)
            if abs(image.width() - width) < 1:
                continue
            image.setWidth(width)
            image.setHeight(size.height() * width / size.width())
            cursor = QTextCursor(doc)
            cursor.setPosition(position)
            cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
            cursor.setCharFormat(image)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.fit_images()


class HelpWindow(QWidget):
    """The guides in a window of their own: Back, Forward, the contents and the two guides the
    Help menu names, the page, and a line for what a link could not open."""

    def __init__(self, parent: QWidget, text_points: Callable[[], int]) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Decoding Lab guides")
        self.text_points = text_points
        self.zoom = 0  # this window's own A+ / A- on top of the main window's size
        self.browser = GuideBrowser(self)
        self.browser.setOpenLinks(False)  # followed here: guides, headings, the web
        self.browser.setUndoRedoEnabled(False)
        self.browser.anchorClicked.connect(self.follow)
        self.browser.sourceChanged.connect(self._show_title)
        self.note = QLabel(self)
        self.note.setWordWrap(True)
        bar = QToolBar(self)
        self.back = bar.addAction("◀ Back", self.browser.backward)
        self.forward = bar.addAction("Forward ▶", self.browser.forward)
        self.browser.backwardAvailable.connect(self.back.setEnabled)
        self.browser.forwardAvailable.connect(self.forward.setEnabled)
        self.back.setEnabled(False)
        self.forward.setEnabled(False)
        bar.addSeparator()
        bar.addAction("Contents", lambda: self.open("contents"))
        bar.addAction("User guide", lambda: self.open("user"))
        bar.addAction("Teacher's guide", lambda: self.open("teacher"))
        bar.addSeparator()
        bar.addAction("A+", lambda: self.set_zoom(self.zoom + 2)).setToolTip("Bigger text")
        bar.addAction("A−", lambda: self.set_zoom(self.zoom - 2)).setToolTip("Smaller text")
        for keys, step in (("Ctrl++", 2), ("Ctrl+=", 2), ("Ctrl+-", -2)):
            QShortcut(QKeySequence(keys), self, lambda s=step: self.set_zoom(self.zoom + s))
        QShortcut(QKeySequence("Alt+Left"), self, self.browser.backward)
        QShortcut(QKeySequence("Alt+Right"), self, self.browser.forward)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Close), self, self.close)
        QShortcut(QKeySequence("Esc"), self, self.close)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(bar)
        layout.addWidget(self.browser, 1)
        layout.addWidget(self.note)
        self.note.hide()
        self.apply_text_size()

    def open(self, guide: str) -> None:
        """Show a guide by its Help name (``GUIDES``) or file name, with ``#heading`` or not."""
        name, _, anchor = guide.partition("#")
        url = QUrl.fromLocalFile(str(GUIDES_DIR / GUIDES.get(name, name)))
        if anchor:
            url.setFragment(anchor)
        parent = self.parentWidget()
        if not self.isVisible() and parent is not None:
            # over the window, most of its size: readable, and the window stays in sight
            self.resize(max(640, parent.width() * 3 // 4), max(480, parent.height() * 9 // 10))
            self.move(parent.geometry().center() - self.rect().center())
        self.apply_text_size()  # before the page is laid out and scrolled to its heading
        self.go(url)
        self.show()
        self.raise_()
        self.activateWindow()

    def go(self, url: QUrl) -> None:
        path = Path(url.toLocalFile())
        if not path.is_file():
            self.say(f"{path.name} is not in this copy of the guides ({path.parent}).")
            return
        self.note.hide()
        self.browser.setSource(url)
        if url.hasFragment() and not self.browser.scroll_to_heading(url.fragment()):
            self.say(f"{path.name} has no heading #{url.fragment()}.")

    def follow(self, url: QUrl) -> None:
        """A clicked link: the web in the browser, a guide (or a heading) here, anything else
        with the desktop's own program."""
        if url.scheme() in WEB:
            QDesktopServices.openUrl(url)
            return
        target = self.browser.source().resolved(url)
        if target.toLocalFile().endswith(".md"):
            self.go(target)
        elif Path(target.toLocalFile()).exists():
            QDesktopServices.openUrl(target)
        else:
            self.say(f"{url.toString()} is not in this copy of the guides.")

    def say(self, text: str) -> None:
        self.note.setText(text)
        self.note.show()

    def set_zoom(self, steps: int) -> None:
        self.zoom = max(-6, min(24, steps))
        self.apply_text_size()

    def apply_text_size(self) -> None:
        """The window's text size (the presentation view's when it is on), plus this window's
        own zoom."""
        points = max(8, self.text_points())
        if self.font().pointSize() != points:  # the bar and the notes too
            font = self.font()
            font.setPointSize(points)
            self.setFont(font)
        page = self.browser.font()
        page.setPointSize(max(8, points + self.zoom))
        self.browser.setFont(page)
        self.browser.document().setDefaultFont(page)

    def event(self, e: QEvent) -> bool:
        # the main window's zoom and the presentation view set the application's font
        if e.type() in (QEvent.Type.ApplicationFontChange, QEvent.Type.FontChange):
            self.apply_text_size()
        return super().event(e)

    def _show_title(self, url: QUrl) -> None:
        self.note.hide()
        title = self.browser.documentTitle() or self.browser.document().firstBlock().text()
        self.setWindowTitle(f"{title} — Decoding Lab" if title else "Decoding Lab guides")


class Guides(QObject):
    """What the Help menu calls: the guide window, built the first time it is asked for."""

    def __init__(self, parent: QWidget, text_points: Callable[[], int]) -> None:
        super().__init__(parent)
        self._parent, self._text_points = parent, text_points
        self.window: HelpWindow | None = None

    def open(self, guide: str) -> None:
        if self.window is None:
            self.window = HelpWindow(self._parent, self._text_points)
        self.window.open(guide)
