"""The editor's ``view`` of documents, as AIO's ``str_replace_editor`` does it (issue 27): a PDF's
pages (``page_range``), a spreadsheet's sheets and rows (``sheet_name``, ``row_range``) and a
presentation's slides (``slide_range``), each made by a real tool (matplotlib and openpyxl in
the sandbox, python-pptx here), read through the REST route and through AIO's MCP tool name;
fields that do not fit the file answer 422 naming the field.
"""

import base64
import io
import json

import pytest
from pptx import Presentation

from conftest import docker

DOCS = "/home/agent/docs"

MAKE = r"""
import os
os.makedirs("%(docs)s", exist_ok=True)
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.backends.backend_pdf import PdfPages
with PdfPages("%(docs)s/report.pdf") as pdf:
    for n, word in enumerate(["one", "two", "three"], 1):
        figure = plt.figure(figsize=(8.27, 11.69))
        figure.text(0.1, 0.9, f"Page {word} of the report", fontsize=20)
        pdf.savefig(figure)
        plt.close(figure)
from openpyxl import Workbook
book = Workbook()
sales = book.active
sales.title = "Sales"
sales.append(["month", "units"])
for month in range(1, 13):
    sales.append([f"M{month:02}", month * 10])
notes = book.create_sheet("Notes")
notes.append(["remember the milk"])
book.save("%(docs)s/data.xlsx")
open("%(docs)s/broken.pdf", "w").write("not a pdf at all")
open("%(docs)s/plain.txt", "w").write("just text\n")
""" % {"docs": DOCS}


def pptx_bytes() -> bytes:
    deck = Presentation()
    for title, body in [("Opening", "first words"), ("Middle", "the main point"), ("Closing", "thanks")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


@pytest.fixture(scope="module")
def docs(sandbox):
    docker("exec", "-u", "agent", sandbox.id, "python3", "-c", MAKE)
    status, answer = sandbox.request("POST", "/v1/file/write", {
        "file": f"{DOCS}/deck.pptx",
        "content": base64.b64encode(pptx_bytes()).decode(),
        "encoding": "base64",
    })
    assert status == 200, answer
    return sandbox


def view(sandbox, path, **fields):
    return sandbox.request("POST", "/v1/file/str_replace_editor", {"command": "view", "path": f"{DOCS}/{path}", **fields})


def test_pdf_pages(docs):
    status, answer = view(docs, "report.pdf", page_range=[2, -1])
    assert status == 200, answer
    output = answer["data"]["output"]
    assert output.startswith("[PDF: pages 2-3 of 3]"), output
    assert "--- Page 2 ---" in output and "Page two of the report" in output
    assert "Page three of the report" in output and "Page one" not in output
    status, answer = view(docs, "report.pdf")
    assert status == 200 and "Page one of the report" in answer["data"]["output"], answer
    status, answer = view(docs, "report.pdf", page_range=[4, 5])
    assert status == 422 and answer["detail"][0]["loc"][-1] == "page_range", answer
    status, answer = view(docs, "broken.pdf")
    assert status == 422 and "not a readable PDF" in answer["message"], answer


def test_spreadsheet_sheets_and_rows(docs):
    status, answer = view(docs, "data.xlsx", row_range=[2, 4])
    assert status == 200, answer
    output = answer["data"]["output"]
    assert 'sheet "Sales", rows 2-4 of 13' in output, output
    lines = output.splitlines()[1:]
    assert lines == ["2\tM01\t10", "3\tM02\t20", "4\tM03\t30"], lines
    status, answer = view(docs, "data.xlsx", sheet_name="Notes")
    assert status == 200 and "remember the milk" in answer["data"]["output"], answer
    status, answer = view(docs, "data.xlsx", sheet_name="Nope")
    assert status == 422 and answer["detail"][0]["loc"][-1] == "sheet_name", answer
    assert "Sales" in answer["message"]


def test_presentation_slides(docs):
    status, answer = view(docs, "deck.pptx", slide_range=[2, 2])
    assert status == 200, answer
    output = answer["data"]["output"]
    assert output.startswith("[Presentation: slides 2-2 of 3]"), output
    assert "Middle" in output and "the main point" in output
    assert "Opening" not in output and "Closing" not in output


def test_fields_that_do_not_fit_the_file_are_422_naming_the_field(docs):
    for path, fields, field in [
        ("data.xlsx", {"page_range": [1, 1]}, "page_range"),
        ("plain.txt", {"page_range": [1, 1]}, "page_range"),
        ("report.pdf", {"slide_range": [1, 1]}, "slide_range"),
        ("deck.pptx", {"sheet_name": "Sales"}, "sheet_name"),
        ("data.xlsx", {"row_range": [0, 3]}, "row_range"),
        ("data.xlsx", {"row_range": [3]}, "row_range"),
        ("report.pdf", {"view_range": [1, 2]}, "view_range"),
    ]:
        status, answer = view(docs, path, **fields)
        assert status == 422, (path, fields, answer)
        assert answer["detail"][0]["loc"][-1] == field, (path, fields, answer)
    status, answer = docs.request("POST", "/v1/file/str_replace_editor", {
        "command": "create", "path": f"{DOCS}/new.txt", "file_text": "x", "page_range": [1, 1]})
    assert status == 422 and answer["detail"][0]["loc"][-1] == "page_range", answer
    status, _ = docs.request("POST", "/v1/file/read", {"file": f"{DOCS}/new.txt"})
    assert status == 404, "a refused create writes nothing"
    # A plain text file is still viewed as text.
    status, answer = view(docs, "plain.txt")
    assert status == 200 and "just text" in answer["data"]["output"], answer


def test_documents_through_aios_mcp_tool(docs):
    status, answer = docs.request("POST", "/v1/mcp/sandbox/tools/sandbox_str_replace_editor", {
        "command": "view", "path": f"{DOCS}/report.pdf", "page_range": [1, 1]})
    assert status == 200, answer
    text = json.dumps(answer["data"])
    assert "Page one of the report" in text and "Page two" not in text
