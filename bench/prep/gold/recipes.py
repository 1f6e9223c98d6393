# Per page: (containers in reading order, parts removed inside them). Read off each page's HTML by
# hand; see ../pages/README.md. Executed by draft_gold.py.
RECIPES = {
    "news_cnn": (["//div[@id='cnnContentContainer']/h1", "//div[@class='cnn_strycntntlft']"], []),
    "news_foxnews": (["//h1", "//div[contains(@class,'entry-content')]"], []),
    "news_time": (["//h1", "//div[@class='articleContent']"], []),
    "news_businessweek": (["//h1", "//div[@id='storyBody']"], []),
    "news_usatoday": (["//h1[contains(@class,'asset-headline')]", "//article/div[contains(@class,'double-wide')]"],
                      ["//div[contains(@class,'video-asset')]"]),
    "news_politico": (["//div[@id='mainContent']/div[1]/h1", "//div[contains(@class,'story-text')]"], []),
    "news_telegraph": (["//h1", "//div[@id='mainBodyArea']"], []),
    "news_elpais": (["(//h1)[1]", "//div[@id='cuerpo_noticia']"], []),
    "blog_dcurtis": (["//article"], []),
    "blog_mcsweeney": (["//div[@id='content']/h1", "//div[@class='articleBody']"], []),
    "blog_techcrunch": (["//h1[@class='headline']", "//div[@class='body-copy']"], []),
    "blog_gizmodo": (["//h1[contains(@class,'headline')]", "//div[contains(@class,'post-content')]"],
                     ["//div[@id='inset_groups']"]),
    "blog_theverge": (["//article//h1", "//div[@id='article-body']"], []),
    "blog_engadget": (["//div[@class='post_body']"], []),
}
RECIPES.update({
    "docs_cppreference_push_back": (["//h1[@id='firstHeading']", "//div[@id='mw-content-text']"],
                                    ["//table[contains(@class,'t-navbar')]", "//div[contains(@class,'t-navbar')]",
                                     "//div[@class='printfooter']", "//div[@id='catlinks']"]),
    "docs_cppreference_string_find": (["//h1[@id='firstHeading']", "//div[@id='mw-content-text']"],
                                      ["//table[contains(@class,'t-navbar')]", "//div[contains(@class,'t-navbar')]",
                                       "//div[@class='printfooter']", "//div[@id='catlinks']"]),
    "docs_linux_management_style": (["//div[@role='main']"], ["//a[@class='headerlink']"]),
    "docs_python_secrets": (["//div[@role='main']"], ["//a[@class='headerlink']"]),
    "docs_python_sorting": (["//div[@role='main']"], ["//a[@class='headerlink']"]),
    "docs_postgres_sql_vacuum": (["//div[@class='refentry']"], []),
    "docs_postgres_tutorial_window": (["//div[@class='sect1']"], []),
    "zh_docs_kernel_bug_bisect_big5": (["//div[@role='main']"], ["//a[@class='headerlink']"]),
    "zh_docs_kernel_highmem_gbk": (["//div[@role='main']"], ["//a[@class='headerlink']", "//nav[@id='contents']"]),
    "zh_docs_debian_reference_ch08": (["//div[@class='chapter']"], ["//div[@class='toc']"]),
    "zh_docs_libreoffice_calc_05120000": (["//div[@id='DisplayArea']"], []),
})
RECIPES.update({
    "zh_news_bbc": (["//h1", "//div[contains(@class,'story-body')]/div[@class='bodytext']"], []),
})
# Forum pages: the thread title and the text of every post. Not: authors, dates, post numbers, vote and
# reply links, "in reply to" headers, signatures, avatars and user statistics, quick-reply and login
# forms, hidden dialogs (FlaskBB's Markdown cheat sheet), sidebars, forum jumps.
RECIPES.update({
    "forum_hn_best_papers": (["//span[@class='titleline']", "//div[@class='toptext']",
                              "//span[contains(@class,'commtext')]"], []),
    "forum_mybb_sv_update": (["//td[@class='thead']/div[not(@class)]/strong",
                              "//div[contains(@class,'post_body')]"], []),
    "forum_flaskbb_install_windows": (["//div[contains(@class,'topic-header')]",
                                       "//div[contains(@class,'post-content')]"],
                                      ["//div[contains(@class,'post-signature')]"]),
    "forum_rubychina_scripting": (["//div[contains(@class,'topic-detail')]//h1/span[@class='title']",
                                   "//div[contains(@class,'topic-detail')]/div[contains(@class,'card-body')]",
                                   "//div[@id='replies']//div[@class='markdown']"],
                                  ["//div[contains(@class,'toc-container')]"]),
})
