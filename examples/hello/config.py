app_name = "hello"
title = "Hello API"
description = "The example project of filerouter: users, items, files, colors and orders."
version = "1.0.0"
