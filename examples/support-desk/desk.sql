-- The support desk's database, created by `warden mcp` when desk.db does not exist.
CREATE TABLE tickets (
  id INTEGER PRIMARY KEY,
  title TEXT NOT NULL,
  customer TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'open',
  note TEXT
);
INSERT INTO tickets (id, title, customer) VALUES
  (1, 'Refund not received after 10 days', 'ada@example.com'),
  (2, 'Cannot log in with two-factor code', 'grace@example.com'),
  (3, 'Invoice shows the wrong address', 'alan@example.com'),
  (4, 'Refund requested for a duplicate order', 'barbara@example.com'),
  (5, 'App crashes when exporting a report', 'edsger@example.com'),
  (6, 'Change the billing email', 'donald@example.com');
