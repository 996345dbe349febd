app_name = "hello"
title = "Hello API"
version = "1.0.0"
