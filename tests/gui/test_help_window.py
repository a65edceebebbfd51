"""Help > User guide / Teacher's guide open the guides of resources/docs in a window of their
own: the page rendered from Markdown, every link between guides and to a heading followed in
that window, the pictures fitted to its width, and the text at the presentation view's size
while it is on."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QUrl
from PySide6.QtWidgets import QMenu

from gui.shell.appearance import PRESENT_MIN_PT
from gui.shell.help import GUIDES_DIR, HelpWindow


def help_window(window, qtbot, action: str = "user_guide") -> HelpWindow:
    window.acts[action].trigger()
    h = window.findChild(HelpWindow)
    assert h is not None
    qtbot.waitUntil(h.isVisible, timeout=5000)
    return h


def top_line(h: HelpWindow) -> str:
    """The text of the line at the top of the page (a little below its edge: the margin above
    a heading belongs to what comes before it)."""
    return h.browser.cursorForPosition(QPoint(10, 12)).block().text()


def page_links(h: HelpWindow) -> list[str]:
    doc, out = h.browser.document(), []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            href = it.fragment().charFormat().anchorHref()
            if href and href not in out:
                out.append(href)
            it += 1
        block = block.next()
    return out


def test_the_help_menu_lists_the_guides_first(window):
    menu = next(
        a.menu() for a in window.menuBar().actions() if a.text() == "&Help"
    )  # fmt: skip
    assert isinstance(menu, QMenu)
    texts = [a.text() or "---" for a in menu.actions()]
    assert texts == ["User guide", "Teacher's guide", "---", "Keyboard shortcuts",
                     "About Decoding Lab"]  # fmt: skip


def test_the_user_guide_opens_and_its_links_go_to_guides_and_headings(window, qtbot, tmp_path):
    h = help_window(window, qtbot)
    b = h.browser
    assert b.source().fileName() == "user-guide.md"
    assert b.document().firstBlock().text() == "User guide"
    assert "Teacher's guide" not in h.windowTitle() and "User guide" in h.windowTitle()
    # a heading of this page
    h.follow(QUrl("#inside"))
    assert top_line(h) == "Inside" and not h.note.isVisible()
    # another guide, at one of its headings
    h.follow(QUrl("cli.md#tree-and-score"))
    assert b.source().fileName() == "cli.md" and top_line(h) == "tree and score"
    h.browser.backward()
    assert b.source().fileName() == "user-guide.md"
    # a link that leads nowhere says so in the window
    h.follow(QUrl("no-such-guide.md"))
    assert h.note.isVisible() and "no-such-guide.md" in h.note.text()
    h.grab().save(str(tmp_path / "help-user-guide.png"))


def test_every_link_of_every_guide_opens_in_the_window(window, qtbot):
    h = help_window(window, qtbot)
    for guide in sorted(GUIDES_DIR.glob("*.md")):
        h.open(guide.name)
        hrefs = page_links(h)
        for href in hrefs:
            if href.startswith(("http://", "https://", "mailto:")):
                continue
            h.open(guide.name)
            h.follow(QUrl(href))
            assert not h.note.isVisible(), f"{guide.name}: {href}: {h.note.text()}"
            if "#" in href:
                assert h.browser.source().fragment() == href.split("#")[1]


def test_the_teachers_guide_and_its_pictures_fit_the_window(window, qtbot):
    h = help_window(window, qtbot, "teachers_guide")
    assert h.browser.source().fileName() == "teachers-guide.md"
    room = h.browser.viewport().width()
    widths = []
    block = h.browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isImageFormat():
                widths.append(fmt.toImageFormat().width())
            it += 1
        block = block.next()
    assert widths and all(0 < w <= room for w in widths), (widths, room)


def test_the_guides_are_read_at_the_presentation_views_size(window, qtbot, tmp_path):
    h = help_window(window, qtbot)
    normal = h.browser.font().pointSize()
    assert normal == window.font_pt
    window.set_presentation(True)
    qtbot.waitUntil(lambda: h.browser.font().pointSize() >= PRESENT_MIN_PT, timeout=5000)
    h.open("teacher#presentation-view-f5")
    assert top_line(h) == "Presentation view (F5)"
    h.grab().save(str(tmp_path / "help-presentation.png"))
    window.set_presentation(False)
    qtbot.waitUntil(lambda: h.browser.font().pointSize() == normal, timeout=5000)
    # its own A+ on top of the window's size
    h.set_zoom(4)
    assert h.browser.font().pointSize() == normal + 4
