-- The ticket summariser's database, created by `warden mcp` when desk.db does not exist.
CREATE TABLE tickets (
  id INTEGER PRIMARY KEY,
  title TEXT NOT NULL,
  customer TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'open',
  note TEXT,
  summary TEXT
);
-- Each ticket's thread: what the customer and the agents wrote.
CREATE TABLE messages (
  ticket_id INTEGER NOT NULL REFERENCES tickets (id),
  at TEXT NOT NULL,
  author TEXT NOT NULL,
  body TEXT NOT NULL
);
INSERT INTO tickets (id, title, customer) VALUES
  (1, 'Refund not received after 10 days', 'ada@example.com'),
  (2, 'Cannot log in with two-factor code', 'grace@example.com'),
  (3, 'Invoice shows the wrong address', 'alan@example.com'),
  (4, 'Refund requested for a duplicate order', 'barbara@example.com'),
  (5, 'App crashes when exporting a report', 'edsger@example.com'),
  (6, 'Change the billing email', 'donald@example.com');
INSERT INTO messages (ticket_id, at, author, body) VALUES
  (1, '2026-11-20 09:12', 'ada@example.com', 'I returned the blender on the 10th and the refund has not arrived.'),
  (1, '2026-11-20 11:40', 'agent', 'The refund was issued on the 12th; banks take up to 10 working days.'),
  (1, '2026-11-27 08:03', 'ada@example.com', 'Still nothing. Can you send proof of the refund?'),
  (2, '2026-11-25 14:22', 'grace@example.com', 'My two-factor codes are always rejected since I changed phones.'),
  (3, '2026-11-26 10:05', 'alan@example.com', 'The November invoice has my old address in Manchester.');
