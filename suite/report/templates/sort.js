// Click a column header to sort its table. A cell sorts by its data-sort where its text is not its key (numbers
// shown with units sort as numbers, empty values ("—") sort last in both directions), else by its text.
document.querySelectorAll("table.sortable").forEach((table) => {
  table.querySelectorAll("thead th").forEach((th, index) => {
    th.tabIndex = 0;
    const sort = () => {
      const ascending = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("thead th").forEach((other) => other.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      const key = (row) => {
        const cell = row.cells[index];
        return cell ? (cell.dataset.sort ?? cell.textContent.trim()) : "";
      };
      const compare = (a, b) => {
        if (a === "" || b === "") return a === b ? 0 : a === "" ? 1 : -1;
        const x = Number(a), y = Number(b);
        const order = !isNaN(x) && !isNaN(y) ? x - y : String(a).localeCompare(String(b), undefined, {numeric: true});
        return ascending ? order : -order;
      };
      const body = table.tBodies[0];
      Array.from(body.rows).sort((a, b) => compare(key(a), key(b))).forEach((row) => body.appendChild(row));
    };
    th.addEventListener("click", sort);
    th.addEventListener("keydown", (event) => { if (event.key === "Enter") sort(); });
  });
});
