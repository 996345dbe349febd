wrk.method = "POST"
wrk.body   = '{"id": 7, "customer": "Ada Lovelace", "email": "ada@example.com", "quantity": "3", "price": 9.5, "currency": "GBP", "express": true, "tags": ["gift", "book"], "placed": "2026-11-28", "note": null}'
wrk.headers["Content-Type"] = "application/json"
